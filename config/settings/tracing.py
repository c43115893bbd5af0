"""Traces (smsgw.tracing; docs/observability.md, "Traces"): OpenTelemetry, exported as OTLP over HTTP."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from smsgw.config.env import env_bool, env_float, env_is_set, env_str

# --- traces (smsgw.tracing) -------------------------------------------------------------------------
# The OTLP/HTTP collector the spans are sent to (e.g. http://127.0.0.1:4318; the exporter adds
# /v1/traces). Read by the OpenTelemetry exporter itself, as are the other OTEL_EXPORTER_OTLP_* variables
# (headers, timeout, compression, certificate); setting it turns tracing on unless SMSGW_TRACING=0.
TRACING_ENDPOINT = env_str("OTEL_EXPORTER_OTLP_ENDPOINT", "")
# The traces endpoint in full (e.g. http://127.0.0.1:4318/v1/traces), instead of the one above; read by the
# exporter, and turns tracing on likewise.
TRACING_TRACES_ENDPOINT = env_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
# OpenTelemetry traces of each message's journey (API request, sweep, send task, provider request,
# receipt, tenant webhook). Default: on when an OTLP endpoint above is set, off otherwise; off, nothing is
# made or sent.
TRACING = env_bool(
    "SMSGW_TRACING",
    env_is_set("OTEL_EXPORTER_OTLP_ENDPOINT") or env_is_set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
)
# The share of new traces kept (0 to 1): a request's trace is sampled or not as a whole, and a span that
# continues an incoming traceparent follows its caller's choice.
TRACING_SAMPLE_RATIO = env_float("SMSGW_TRACING_SAMPLE_RATIO", 1.0, minimum=0.0)
if TRACING_SAMPLE_RATIO > 1.0:
    raise ImproperlyConfigured(f"SMSGW_TRACING_SAMPLE_RATIO must be <= 1, got {TRACING_SAMPLE_RATIO}")
# Each process's service name in the traces; default smsgw-<role> (smsgw-web, smsgw-worker, smsgw-beat).
# Read by the OpenTelemetry SDK, as are OTEL_RESOURCE_ATTRIBUTES and the OTEL_BSP_* batch settings.
TRACING_SERVICE_NAME = env_str("OTEL_SERVICE_NAME", "")
