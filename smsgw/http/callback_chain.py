"""Provider callbacks (``/receipts/<provider>/``, ``/inbound/<provider>/``) run through a shorter middleware
chain than the API and the admin.

At a send rate of 200/s Twilio posts about 400 status callbacks a second, and the callback endpoint is
one signature check and one INSERT. Most of the other middleware serves people and tenants: sessions,
CSRF, authentication, messages and django-axes serve the admin's logins, X-Frame-Options its pages,
whitenoise the static files, and the rate-limit headers the tenant API (callbacks are exempt from the
limiter). None of it acts on a provider's signed POST, and together it cost about a tenth of the web's
CPU per callback (``python -m bench receipts``, docs/benchmarks.md).

:class:`CallbackChainMiddleware` is the first entry of settings.MIDDLEWARE. For a callback path it hands
the request to a second chain, built by Django from the same settings.MIDDLEWARE less what callbacks do
not use, ending in the same URL resolver and view; every other path goes on through the full chain. It
is plain middleware, so the WSGI server, the test client and the live server all route the same way."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.conf import settings
from django.core.handlers.base import BaseHandler
from django.http import HttpRequest, HttpResponse

CALLBACK_PREFIXES = ("/receipts/", "/inbound/")

# What a provider's callback still goes through, in settings.MIDDLEWARE's order: its rate and latency, the
# Request-Id, the JSON
# error boundary (and its early refusal of bad input), the HTTPS redirect and HSTS, CommonMiddleware
# (Content-Length, DISALLOWED_USER_AGENTS, the missing slash) and the log context.
CALLBACK_MIDDLEWARE = frozenset(
    {
        "smsgw.http.request_metrics.RequestMetricsMiddleware",
        "smsgw.http.request_id.RequestIdMiddleware",
        "smsgw.http.boundary.ApiBoundaryMiddleware",
        "django.middleware.security.SecurityMiddleware",
        "django.middleware.common.CommonMiddleware",
        "smsgw.runtime.logs_json.LogContextMiddleware",
    }
)


def is_callback_path(path: str) -> bool:
    return path.startswith(CALLBACK_PREFIXES)


def callback_middleware(middleware: Iterable[str]) -> list[str]:
    """``middleware`` (settings.MIDDLEWARE) without what callbacks do not use, order kept."""
    return [path for path in middleware if path in CALLBACK_MIDDLEWARE]


class _CallbackHandler(BaseHandler):
    """A handler whose chain is :func:`callback_middleware` of settings.MIDDLEWARE. Django's
    ``load_middleware`` reads the setting itself, so it is narrowed while that runs (once, when the
    full chain is built: at a worker's start, or a test client's first request)."""

    def __init__(self) -> None:
        full = settings.MIDDLEWARE
        settings.MIDDLEWARE = callback_middleware(full)
        try:
            self.load_middleware()
        finally:
            settings.MIDDLEWARE = full


class CallbackChainMiddleware:
    """First in settings.MIDDLEWARE: a provider callback goes through the callbacks' chain instead of the
    rest of this one."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        # BaseHandler.load_middleware sets it; django-stubs does not declare it.
        self.callbacks = _CallbackHandler()._middleware_chain  # type: ignore[attr-defined]

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if is_callback_path(request.path_info):
            return self.callbacks(request)
        return self.get_response(request)
