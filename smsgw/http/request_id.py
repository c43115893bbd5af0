"""A ``Request-Id`` on every response (the tenant API, the Twilio-compatible API, provider callbacks, the
admin, health), in every log line written while the request is answered (smsgw.runtime.logs_json) and in
every error body (``request_id``, smsgw.http.problems): a client that quotes it to the operator finds the
request's lines, as with Stripe's ``Request-Id`` and Twilio's ``Twilio-Request-Id``.

The id is ours (``req_`` and 32 hex digits), unless the request brings one in ``Request-Id`` or
``X-Request-Id`` (a front proxy, or a client tracing its calls through several services) that is short and
plain: at most ``MAX_LENGTH`` characters of ``[A-Za-z0-9._:-]``. Anything else is ignored, not refused: a
log-correlation tag is no reason to fail a request, and an id with spaces, quotes or newlines would forge or
break log lines. An accepted id is the caller's word, so it is not unique: two clients may send the same.

``RequestIdMiddleware`` is outside every other entry of settings.MIDDLEWARE, in the full chain and in the
callbacks' (smsgw.http.callback_chain), so every answer gets the header, the early refusals of
smsgw.http.boundary included. It is also where an error's
media type is settled (``problem_media_type``): every problem is built as ``application/problem+json``,
and a client that accepts only ``application/json`` gets the same body under that type."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from smsgw.http.negotiation import problem_media_type
from smsgw.http.problems import PROBLEM_JSON
from smsgw.runtime.logs_json import request_id_set
from smsgw.tracing.web import request_traced

HEADER = "Request-Id"
MAX_LENGTH = 128
_SAFE = re.compile(rf"[A-Za-z0-9._:-]{{1,{MAX_LENGTH}}}")
# The headers an incoming id is read from, in order (WSGI names).
INCOMING = ("HTTP_REQUEST_ID", "HTTP_X_REQUEST_ID")


def is_acceptable(value: str) -> bool:
    return _SAFE.fullmatch(value) is not None


def request_id_new() -> str:
    return f"req_{uuid.uuid4().hex}"


def request_id_for(request: HttpRequest) -> str:
    """The incoming id when it is acceptable, else a new one."""
    for name in INCOMING:
        value = request.META.get(name, "")
        if isinstance(value, str) and is_acceptable(value):
            return value
    return request_id_new()


class RequestIdMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        value = request_id_for(request)
        request.request_id = value  # type: ignore[attr-defined]  # read by views that log or answer it
        # Cleared when the response is closed (smsgw.runtime.logs_json, request_finished): django.request
        # writes its line for a 4xx/5xx after this returns, and that line belongs to the request.
        request_id_set(value)
        # The request's span, continuing an incoming traceparent, with the id as an attribute; the
        # response gets a `traceparent` header (smsgw.tracing.web).
        response = request_traced(request, value, self.get_response)
        response[HEADER] = value
        if response.get("Content-Type", "").startswith(PROBLEM_JSON):
            response["Content-Type"] = problem_media_type(request.META.get("HTTP_ACCEPT", ""))
        return response
