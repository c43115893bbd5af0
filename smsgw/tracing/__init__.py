"""Opt-in OpenTelemetry traces (docs/observability.md, "Traces"): one trace per message, across processes
and days.

Off unless configured (settings.TRACING: ``SMSGW_TRACING``, on by default once an OTLP endpoint is set):
then every call here is a no-op costing an attribute read. On, each process has its own tracer provider
exporting OTLP over HTTP from a background thread, made after the fork (``setup``: Celery's
``worker_process_init``, gunicorn's ``post_fork``; lazily on first use elsewhere) and flushed before the
process ends (``shutdown``: ``worker_process_shutdown``, gunicorn's ``worker_exit``). A pool child that
ends by ``os._exit`` never runs ``atexit``, and spans still queued in its exporter were lost
(opentelemetry-python-contrib #4916).

A message's trace begins with the request that made it: its W3C ``traceparent`` is stored on the message
at birth (``Message.trace_context``). What happens to it later, possibly days later (the sweep's claim, the
send task, the provider request, the receipt, the tenant webhook), are spans of their own that *link* to
that context: a parent span that ended days ago would make a trace hours wide and a waterfall nobody can
read, and a batch span serves hundreds of messages at once. The trace id is on the message's timeline
entries (``details.trace_id``) and on log lines written in a span (smsgw.runtime.logs_json).

What a span may carry: ids (public message id, provider's message id, request id), statuses, counts,
provider and queue names, a masked number (smsgw.values.phone.mask). Never a body, a full number, a URL's
query or a header's value: the helpers here are the only way attributes are built.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    INVALID_SPAN,
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    TraceFlags,
)

# Re-exported: callers name a kind or a status without importing opentelemetry.
from opentelemetry.trace import SpanKind as SpanKind
from opentelemetry.trace import StatusCode as StatusCode

from smsgw.values.phone import mask

# A W3C traceparent, version 00 (https://www.w3.org/TR/trace-context/#traceparent-header): anything else
# is ignored, never refused (as a Request-Id is: smsgw.http.request_id).
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16
# Links a batch span keeps (the SDK's default is 128): a sweep pass or a receipt batch links every message
# it moved, up to its batch size (SMSGW_SWEEP_BATCH_SIZE, SMSGW_RECEIPT_BATCH_SIZE: 500 by default).
MAX_LINKS = 1000

_lock = threading.Lock()
_provider: Any = None  # this process's TracerProvider once made (None: not made, or tracing off)
_provider_pid: int | None = None


def enabled() -> bool:
    from django.conf import settings

    return bool(getattr(settings, "TRACING", False))


def setup(role: str = "process", *, exporter: Any = None) -> None:
    """This process's tracer provider, once per process (a forked child makes its own: the parent's
    exporter thread does not survive a fork). Nothing when tracing is off. ``exporter``: instead of
    OTLP over HTTP (tests)."""
    global _provider, _provider_pid
    if not enabled():
        return
    with _lock:
        if _provider is not None and _provider_pid == os.getpid():
            return
        _provider, _provider_pid = _provider_make(role, exporter), os.getpid()


def _provider_make(role: str, exporter: Any = None):
    from django.conf import settings
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    attributes: dict[str, Any] = {
        "service.namespace": "smsgw",
        "smsgw.role": role,
        "process.pid": os.getpid(),
    }
    if not os.environ.get("OTEL_SERVICE_NAME"):  # else the SDK's resource detector names it
        attributes["service.name"] = f"smsgw-{role}"
    limits = SpanLimits(max_links=MAX_LINKS) if "OTEL_SPAN_LINK_COUNT_LIMIT" not in os.environ else None
    provider = TracerProvider(
        resource=Resource.create(attributes),
        sampler=ParentBased(TraceIdRatioBased(settings.TRACING_SAMPLE_RATIO)),
        span_limits=limits,
    )
    # The exporter reads its endpoint, headers, timeout and compression from the OTEL_EXPORTER_OTLP_*
    # variables, and the batch processor its delay and queue from OTEL_BSP_* (docs/observability.md).
    provider.add_span_processor(BatchSpanProcessor(exporter or OTLPSpanExporter()))
    return provider


def _role() -> str:
    """This process's role, for a provider made on first use (a process with no setup hook of its own:
    a solo-pool worker, beat, a management command)."""
    if "gunicorn.arbiter" in sys.modules:  # a web process (its own hook makes it, with --preload)
        return "web"
    argv = " ".join(os.path.basename(a) for a in sys.argv)  # celery -A config worker -Q ...
    for word in ("beat", "worker"):
        if word in argv:
            return word
    return os.path.basename(sys.argv[0]).removesuffix(".py") if sys.argv and sys.argv[0] else "process"


def shutdown() -> None:
    """Export what this process still holds and stop its exporter (a pool child about to exit)."""
    global _provider, _provider_pid
    with _lock:
        provider, mine = _provider, _provider_pid == os.getpid()
        _provider, _provider_pid = None, None
    if provider is not None and mine:
        provider.shutdown()


def tracer() -> trace.Tracer:
    if not enabled():
        return trace.NoOpTracer()
    if _provider is None or _provider_pid != os.getpid():
        setup(_role())
    assert _provider is not None
    return _provider.get_tracer("smsgw")


# --- trace contexts -------------------------------------------------------------------------------------
def traceparent_of(context: SpanContext) -> str:
    if not context.is_valid:
        return ""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def traceparent_current() -> str:
    """The current span's traceparent ("" outside a sampled span, and when tracing is off): what a new
    message keeps as its ``trace_context``."""
    if not enabled():
        return ""
    context = trace.get_current_span().get_span_context()
    return traceparent_of(context) if context.trace_flags.sampled else ""


def span_context_of(traceparent: str | None) -> SpanContext | None:
    """The remote span context a traceparent names, or None for anything not a valid version-00 value."""
    found = _TRACEPARENT.fullmatch((traceparent or "").strip().lower())
    if found is None or found[1] == _ZERO_TRACE or found[2] == _ZERO_SPAN:
        return None
    return SpanContext(
        int(found[1], 16), int(found[2], 16), is_remote=True, trace_flags=TraceFlags(int(found[3], 16))
    )


def is_traceparent(value: str | None) -> bool:
    return span_context_of(value) is not None


def trace_id_of(traceparent: str | None) -> str:
    """The 32 hex digits of the trace a traceparent belongs to ("" for none)."""
    context = span_context_of(traceparent)
    return f"{context.trace_id:032x}" if context else ""


def links_to(traceparents: Iterable[str | None]) -> list[Link]:
    """A link to each distinct message trace (messages born without tracing have none)."""
    seen: dict[str, Link] = {}
    for value in traceparents:
        if value and value not in seen and len(seen) < MAX_LINKS:
            context = span_context_of(value)
            if context is not None:
                seen[value] = Link(context)
    return list(seen.values())


def context_with_parent(traceparent: str | None) -> Context | None:
    """A context whose current span is the remote one named (an incoming request's ``traceparent``, a
    task's header), or None."""
    remote = span_context_of(traceparent)
    return trace.set_span_in_context(NonRecordingSpan(remote)) if remote is not None else None


# --- spans ----------------------------------------------------------------------------------------------
@contextmanager
def span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: dict[str, Any] | None = None,
    links: Iterable[str | None] = (),
    parent: str | None = None,
    start_time: int | None = None,
) -> Iterator[Span]:
    """A span, current while the block runs; ``links``: traceparents of the messages it works on;
    ``parent``: a traceparent to continue (a task's header). Off: INVALID_SPAN, and nothing else done."""
    if not enabled():
        yield INVALID_SPAN
        return
    # An exception's text may quote a row (psycopg's DETAIL: a body, a number: smsgw.runtime.logs), so the
    # SDK neither records it nor puts it in the status: the span says only the exception's class.
    with tracer().start_as_current_span(
        name,
        context=context_with_parent(parent),
        kind=kind,
        attributes=attributes,
        links=links_to(links),
        start_time=start_time,
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            current.set_status(StatusCode.ERROR, type(exc).__name__)
            raise


def span_start(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: dict[str, Any] | None = None,
    links: Iterable[str | None] = (),
) -> Span:
    """A span that is not made current, ended by the caller (a request answered on another thread), a
    child of the current span. INVALID_SPAN when tracing is off."""
    if not enabled():
        return INVALID_SPAN
    return tracer().start_span(name, kind=kind, attributes=attributes, links=links_to(links))


def current_attribute(name: str, value: str | int | bool) -> None:
    """An attribute on the current span (nothing outside one, or when tracing is off)."""
    trace.get_current_span().set_attribute(name, value)


def log_fields(public_id: str, trace_context: str | None) -> dict[str, str]:
    """``extra=`` for a log line about one message: its id and, when it was born traced, its trace id
    (smsgw.runtime.logs_json writes both), so the line is found from the trace and the trace from it."""
    trace_id = trace_id_of(trace_context)
    return {"message_id": public_id, **({"trace_id": trace_id} if trace_id else {})}


def number_attribute(number: str | None) -> str:
    """A phone number as a span may carry it: masked (smsgw.values.phone.mask)."""
    return mask(number or "")


def current_links_add(traceparents: Iterable[str | None]) -> None:
    """Links found after the current span started (a batch's rows, known once claimed)."""
    current = trace.get_current_span()
    if not current.is_recording():
        return
    for link in links_to(traceparents):
        current.add_link(link.context)
