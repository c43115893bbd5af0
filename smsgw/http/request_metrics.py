"""Rate and latency of every HTTP request the web answers (smsgw_http_request_duration_seconds), by route,
method and status class.

The route is the URL pattern Django matched (``v1/messages/<str:public_id>``), never the path: a path
holds ids, and a label per id would grow without end (each series is a file entry in every process of
prometheus-client's multiprocess mode, and a row in Prometheus). The admin is one route, ``admin/`` (a
few hundred patterns nobody graphs one by one); a path no pattern matches is ``unmatched``, and the static
files whitenoise serves before any URL is resolved are ``static/``. Methods outside the usual ones count as
``other``.

Second in settings.MIDDLEWARE, right after smsgw.http.callback_chain's switch, and in the callbacks' chain
too: outside every other entry, so every early refusal (the boundary's 413, a 404) is timed as well.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve

from smsgw.observability import events

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
ADMIN = "admin/"


def route_of(request: HttpRequest) -> str:
    """The URL pattern that answered ``request`` (or would have: an early refusal never reached the
    resolver), bounded as the module says."""
    match = getattr(request, "resolver_match", None)
    if match is None:
        static = settings.STATIC_URL or ""
        if static and request.path_info.startswith("/" + static.lstrip("/")):
            return "static/"
        try:
            match = resolve(request.path_info)
        except Resolver404:
            return "unmatched"
    route = match.route or "unmatched"
    return ADMIN if route.startswith(ADMIN) else route


class RequestMetricsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        method = request.method if request.method in METHODS else "other"
        events.http_request(
            route_of(request), str(method), response.status_code, time.perf_counter() - started
        )
        return response
