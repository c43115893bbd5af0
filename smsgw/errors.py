"""One JSON error shape for the whole API: {"error": {"code", "message", "fields": {field: [msgs]}}}.
A database that does not answer is a 503 ``database_unavailable`` with Retry-After (smsgw.unavailable)."""

from __future__ import annotations

from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from smsgw import unavailable


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"

    def __init__(self, message: str, *, current_status: str = "", extra: dict | None = None):
        super().__init__(message)
        self.current_status = current_status
        self.extra = extra or {}


class IdempotencyMismatch(exceptions.APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_code = "idempotency_key_reused"


def field_error(field: str, message: str) -> exceptions.ValidationError:
    return exceptions.ValidationError({field: [message]})


def api_exception_handler(exc, context):
    database_error = exc if unavailable.is_unavailable(exc) else None
    if database_error is not None:
        exc = unavailable.DatabaseUnavailable()
    response = exception_handler(exc, context)
    if response is None:
        return None
    code = getattr(exc, "default_code", "error")
    if isinstance(exc, exceptions.ParseError):
        body = {
            "code": "malformed_request",
            "message": str(exc.detail),
            "fields": {"body": [str(exc.detail)]},
        }
    elif isinstance(exc, exceptions.ValidationError):
        detail = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        fields = {
            k: [str(m) for m in (v if isinstance(v, list) else [v])] for k, v in _flatten(detail).items()
        }
        first = next(iter(fields.items()), ("request", ["invalid"]))
        body = {"code": "invalid", "message": f"{first[0]}: {first[1][0]}", "fields": fields}
    else:
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        body = {"code": code, "message": str(message)}
        if isinstance(exc, Conflict):
            body["status"] = exc.current_status
        body.update(getattr(exc, "extra", None) or {})  # e.g. quota_exceeded: quota, limit, used, resets_at
    answer = Response({"error": body}, status=response.status_code, headers=_headers(response))
    if database_error is not None:
        unavailable.unavailable_noted(context["request"], database_error, answer)
    return answer


# Headers an error response keeps from DRF's own (RateLimit-*: limits.ratelimit, also set by its middleware).
PASSED_HEADERS = frozenset(
    {
        "WWW-Authenticate",
        "Retry-After",
        "RateLimit-Limit",
        "RateLimit-Remaining",
        "RateLimit-Reset",
        "RateLimit-Policy",
    }
)


def _headers(response: Response) -> dict:
    return {k: v for k, v in response.items() if k in PASSED_HEADERS}


def _flatten(detail, prefix: str = "") -> dict:
    out: dict = {}
    for key, value in detail.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out
