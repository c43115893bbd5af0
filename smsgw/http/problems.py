"""The body of every error smsgw answers in its own format: RFC 9457 problem details that also carry the
earlier envelope, so that clients written for either read it.

    {"type": "/docs/errors/#invalid", "title": "Invalid input", "status": 400,
     "detail": "to: enter a number in E.164 format", "code": "invalid",
     "errors": [{"field": "to", "code": "invalid_number", "detail": "enter a number in E.164 format"}],
     "request_id": "req_…",
     "error": {"code": "invalid", "message": "to: …", "fields": {"to": ["…"]}}}

- ``type``: the code's entry in the error catalogue (docs/errors.md): ``SMSGW_ERROR_DOCS_URL`` (settings
  ``ERROR_DOCS_URL``, default ``/docs/errors/``, where the documentation site sits when it is published beside
  the API) followed by ``#<code>``. The code, not the URL, is what a client should switch on: an operator may
  move the catalogue.
- ``title``: the code's short summary, the same for every occurrence (``TITLES``); ``detail``: this
  occurrence, for a person (a 400 names the first field to correct); ``status``: the HTTP status.
- extension members: ``code``; ``errors``, one entry per field to correct, each with its own ``code``
  (DRF's, e.g. ``required``, ``max_length``, ``invalid_choice``, or the rule's, e.g. ``invalid_timezone``);
  ``request_id`` (the response's ``Request-Id``, smsgw.http.request_id); what some codes add
  (``required_scope``, ``retry_after``, a quota's ``quota``/``limit``/``used``/``requested``/``resets_at``,
  a conflict's ``current_status``); and ``error``, the envelope every answer had before (``{"code",
  "message", "fields"?, ...}``), unchanged.

Plain Python apart from the settings read for the catalogue's address; smsgw.http.errors (DRF's
exceptions) and smsgw.http.boundary (Django's own error answers) build their bodies here."""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from smsgw.runtime.logs_json import request_id

PROBLEM_JSON = "application/problem+json"
DEFAULT_DOCS_URL = "/docs/errors/"

# The ``title`` of each code, and the list of every code an error answer's top level can carry:
# tests/smsgw/http/test_error_catalogue.py checks that docs/errors.md has an entry for each, and that
# every code the code can raise is here.
TITLES: dict[str, str] = {
    "invalid": "Invalid input",
    "malformed_request": "Malformed request body",
    "bad_request": "Bad request",
    "not_authenticated": "No API key",
    "authentication_failed": "Authentication failed",
    "permission_denied": "Permission denied",
    "missing_scope": "Missing scope",
    "forbidden": "Forbidden",
    "not_found": "Not found",
    "method_not_allowed": "Method not allowed",
    "conflict": "Conflict with the current status",
    "length_required": "Content-Length required",
    "request_too_large": "Request body too large",
    "url_too_long": "URL too long",
    "unsupported_media_type": "Unsupported media type",
    "expectation_failed": "Expectation failed",
    "idempotency_key_reused": "Idempotency key reused",
    "quota_exceeded": "Quota exceeded",
    "rate_limited": "Too many requests",
    "headers_too_large": "Request headers too large",
    "server_error": "Internal error",
    "not_implemented": "Not implemented",
    "unavailable": "Service unavailable",
    "database_unavailable": "Database unavailable",
    "error": "Request refused",
}

# Extension members of the envelope copied to the top level, renamed where RFC 9457 already uses the name
# (a conflict's ``status`` is the object's, not the HTTP status).
_TOP_LEVEL = {
    "status": "current_status",
    "quota": "quota",
    "limit": "limit",
    "used": "used",
    "requested": "requested",
    "resets_at": "resets_at",
    "required_scope": "required_scope",
    "retry_after": "retry_after",
}


@dataclass(frozen=True)
class FieldError:
    """One thing to correct: ``field`` as the request spells it (a body key, dotted when nested; a query
    parameter; a header), ``code`` machine-readable (docs/errors.md, "Field error codes"), ``detail`` for
    a person."""

    field: str
    code: str
    detail: str


def docs_url() -> str:
    from django.conf import settings

    return str(getattr(settings, "ERROR_DOCS_URL", DEFAULT_DOCS_URL))


def type_uri(code: str) -> str:
    return f"{docs_url()}#{code}"


def title(code: str, status: int) -> str:
    if code in TITLES:
        return TITLES[code]
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def problem(
    status: int,
    code: str,
    detail: str,
    *,
    errors: list[FieldError] | None = None,
    extra: dict[str, Any] | None = None,
    with_request_id: bool = True,
) -> dict[str, Any]:
    """The whole body (the module's docstring). ``extra``: the envelope's further members (a quota's use,
    the required scope, ...). ``with_request_id``: False for a part of an answer (a batch's item), which
    the response's own id covers."""
    envelope: dict[str, Any] = {"code": code, "message": detail}
    if errors:
        fields: dict[str, list[str]] = {}
        for e in errors:
            fields.setdefault(e.field, []).append(e.detail)
        envelope["fields"] = fields
    envelope.update(extra or {})
    body: dict[str, Any] = {
        "type": type_uri(code),
        "title": title(code, status),
        "status": status,
        "detail": detail,
        "code": code,
    }
    if errors:
        body["errors"] = [{"field": e.field, "code": e.code, "detail": e.detail} for e in errors]
    for key, value in (extra or {}).items():
        if key in _TOP_LEVEL:
            body[_TOP_LEVEL[key]] = value
    current = request_id() if with_request_id else None
    if current:
        body["request_id"] = current
    body["error"] = envelope
    return body
