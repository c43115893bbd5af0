"""One error shape for the whole API: RFC 9457 problem details that carry the earlier envelope
``{"error": {"code", "message", "fields": {field: [msgs]}}}`` too (smsgw.http.problems), answered as
``application/problem+json`` (or ``application/json`` to a client that prefers it: smsgw.http.negotiation).

Services raise the project's own errors (smsgw.domain_errors); this handler (REST_FRAMEWORK
["EXCEPTION_HANDLER"]) is where they become HTTP: a status per class (``STATUS``), the problem, and
Retry-After where the error says how long to wait. Each field to correct keeps its own code: DRF's
(``required``, ``max_length``, ...) or the domain's (``InvalidInput.reason``; ``invalid`` when it has none).
Views, serializers and the authentication, throttle and pagination classes may raise DRF's own
exceptions; they land in the same shape. A database that does not answer is a 503
``database_unavailable`` with Retry-After (smsgw.http.unavailable)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from smsgw import domain_errors
from smsgw.http import unavailable
from smsgw.http.problems import PROBLEM_JSON, FieldError, problem

# The HTTP status of each domain error; a subclass not listed takes its nearest listed base's.
STATUS: dict[type[domain_errors.DomainError], int] = {
    domain_errors.DomainError: status.HTTP_400_BAD_REQUEST,
    domain_errors.InvalidInput: status.HTTP_400_BAD_REQUEST,
    domain_errors.NotFoundError: status.HTTP_404_NOT_FOUND,
    domain_errors.ConflictError: status.HTTP_409_CONFLICT,
    domain_errors.IdempotencyMismatch: status.HTTP_422_UNPROCESSABLE_ENTITY,
    domain_errors.QuotaExceeded: status.HTTP_429_TOO_MANY_REQUESTS,
    domain_errors.RateLimited: status.HTTP_429_TOO_MANY_REQUESTS,
    domain_errors.Unavailable: status.HTTP_503_SERVICE_UNAVAILABLE,
}


def http_status(error: domain_errors.DomainError) -> int:
    return next(STATUS[cls] for cls in type(error).__mro__ if cls in STATUS)


class DomainRefusal(exceptions.APIException):
    """A domain error in DRF's terms, so DRF's own handler answers it as it answers its exceptions: the
    status, Retry-After (from ``wait``) and the rollback of an ATOMIC_REQUESTS transaction."""

    def __init__(self, error: domain_errors.DomainError):
        super().__init__(error.message, code=error.code)
        self.status_code = http_status(error)
        self.default_code = error.code
        self.error = error
        self.wait = getattr(error, "retry_after", None)


def field_error(field: str, message: str) -> exceptions.ValidationError:
    """For views and serializers: a 400 naming one field (services raise domain_errors.InvalidInput)."""
    return exceptions.ValidationError({field: [message]})


def as_drf(exc: Exception) -> Exception:
    """A domain error as the DRF exception that answers it (an invalid input is a ValidationError, so it
    reads like a serializer's); anything else unchanged."""
    if isinstance(exc, Http404):  # as DRF's own handler does, so that the envelope reads `detail`
        return exceptions.NotFound(*exc.args)
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied(*exc.args)
    if isinstance(exc, domain_errors.InvalidInput):
        detail = exceptions.ErrorDetail(exc.message, code=exc.reason or domain_errors.InvalidInput.code)
        return exceptions.ValidationError({exc.field: [detail]})
    if isinstance(exc, domain_errors.DomainError):
        return DomainRefusal(exc)
    return exc


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    database_error = exc if unavailable.is_unavailable(exc) else None
    if database_error is not None:
        exc = unavailable.database_unavailable()
    exc = as_drf(exc)
    response = exception_handler(exc, context)
    if response is None:
        return None
    answer = Response(
        _problem(exc, response.status_code),
        status=response.status_code,
        headers=_headers(response),
        content_type=PROBLEM_JSON,  # or application/json, by the Accept header: smsgw.http.request_id
    )
    if database_error is not None:
        unavailable.unavailable_noted(context["request"], database_error, answer)
    return answer


def error_answer(exc: Exception) -> tuple[int, dict[str, Any]]:
    """The status and problem (without ``request_id``: the response's covers it) the API answers a domain
    error or a DRF exception with, for an answer that carries several (each item of
    ``POST /v1/messages/batch``)."""
    exc = as_drf(exc)
    assert isinstance(exc, exceptions.APIException), exc  # domain errors and DRF's own
    return exc.status_code, _problem(exc, exc.status_code, with_request_id=False)


def _problem(exc: Exception, http_status: int, *, with_request_id: bool = True) -> dict[str, Any]:
    code = getattr(exc, "default_code", "error")
    if isinstance(exc, exceptions.ParseError):
        message = str(exc.detail)
        return problem(
            http_status,
            "malformed_request",
            message,
            errors=[FieldError("body", "malformed_request", message)],
            with_request_id=with_request_id,
        )
    if isinstance(exc, exceptions.ValidationError):
        detail = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        errors = [
            _unechoed(FieldError(field, getattr(m, "code", None) or "invalid", str(m)))
            for field, value in _flatten(detail).items()
            for m in (value if isinstance(value, list) else [value])
        ]
        first = errors[0] if errors else FieldError("request", "invalid", "invalid")
        return problem(
            http_status,
            "invalid",
            f"{first.field}: {first.detail}",
            errors=errors,
            with_request_id=with_request_id,
        )
    assert isinstance(exc, exceptions.APIException)  # DRF answered it, so it is one (as_drf)
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    # e.g. missing_scope: required_scope (smsgw.tenancy.permissions.MissingScope)
    extra: dict[str, Any] = dict(getattr(exc, "envelope_extra", {}))
    if isinstance(exc, DomainRefusal):
        if isinstance(exc.error, domain_errors.ConflictError):
            extra["status"] = exc.error.current_status
        extra.update(exc.error.extra)  # e.g. quota_exceeded: quota, limit, used, resets_at
    return problem(http_status, code, str(message), extra=extra, with_request_id=with_request_id)


# DRF's ChoiceField repeats the value it refuses ('"<input>" is not a valid choice.'), however long: the
# API's messages do not repeat what was sent (docs/api.md, "Errors"), and the schema lists the choices.
_DRF_CHOICE = re.compile(r'^".*" is not a valid (path )?choice\.$', re.DOTALL)
NOT_A_CHOICE = "not one of the allowed values (the API reference lists them)"


def _unechoed(error: FieldError) -> FieldError:
    if error.code == "invalid_choice" and _DRF_CHOICE.match(error.detail):
        return FieldError(error.field, error.code, NOT_A_CHOICE)
    return error


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


def _headers(response: Response) -> dict[str, str]:
    return {k: v for k, v in response.items() if k in PASSED_HEADERS}


def _flatten(detail: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in detail.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out
