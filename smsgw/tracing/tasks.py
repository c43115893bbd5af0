"""Trace context through the broker: a task published inside a span carries that span's ``traceparent``
as a message header, and the task's own span continues it (the sweep pass and the send batches it
published are one trace; each message's trace is linked, not parented: smsgw.tracing)."""

from __future__ import annotations

from typing import Any

from smsgw import tracing

HEADER = "traceparent"


def publish_headers() -> dict[str, str]:
    """Headers for ``apply_async(headers=...)``: the current span's traceparent, or none."""
    traceparent = tracing.traceparent_current()
    return {HEADER: traceparent} if traceparent else {}


def task_traceparent(request: Any) -> str | None:
    """The traceparent a task was published with. Celery (message protocol 2) puts a custom header on the
    task's request context; ``headers`` holds it for a message published by an older client."""
    value = getattr(request, HEADER, None) or (getattr(request, "headers", None) or {}).get(HEADER)
    return value if isinstance(value, str) and tracing.is_traceparent(value) else None
