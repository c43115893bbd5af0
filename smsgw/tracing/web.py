"""The web request's span (smsgw.http.request_id.RequestIdMiddleware, outside every other middleware in
both chains, runs every request through ``request_traced``).

An incoming ``traceparent`` is honoured: the request's span continues the caller's trace (a client or
front proxy tracing its calls), so a message created by it is in the caller's trace. The response carries
the ``traceparent`` of the request's span, or, tracing off, the caller's own back (an echo costs nothing
and lets the caller see it was read). The span names the route template (``POST v1/messages``), never the
path's values or the query: a path may hold a number (``/v1/conversations/<to>``), and ``url.path`` is
the path with numbers masked (smsgw.runtime.logs.redact). The request id is an attribute, so a
``Request-Id`` quoted by a client finds the trace as well as the log lines.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from smsgw import tracing
from smsgw.runtime.logs import redact

HEADER = "traceparent"
# Probes and scrapes: several a minute from every load balancer and Prometheus, none about a message.
UNTRACED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


def request_traced(
    request: HttpRequest, request_id: str, get_response: Callable[[HttpRequest], HttpResponse]
) -> HttpResponse:
    incoming = request.META.get("HTTP_TRACEPARENT", "")
    incoming = incoming if isinstance(incoming, str) and tracing.is_traceparent(incoming) else ""
    if not tracing.enabled() or request.path in UNTRACED_PATHS:
        response = get_response(request)
        if incoming:
            response[HEADER] = incoming.strip().lower()
        return response
    method = request.method or "GET"
    with tracing.span(
        method,
        kind=tracing.SpanKind.SERVER,
        parent=incoming or None,
        attributes={
            "http.request.method": method,
            "url.path": redact(request.path),
            "smsgw.request_id": request_id,
        },
    ) as span:
        response = get_response(request)
        match = getattr(request, "resolver_match", None)
        route = getattr(match, "route", "") if match is not None else ""
        if route:
            span.update_name(f"{method} {route}")
            span.set_attribute("http.route", route)
        span.set_attribute("http.response.status_code", response.status_code)
        if response.status_code >= 500:
            span.set_status(tracing.StatusCode.ERROR)
        traceparent = tracing.traceparent_of(span.get_span_context())
    if traceparent:
        response[HEADER] = traceparent
    elif incoming:
        response[HEADER] = incoming.strip().lower()
    return response
