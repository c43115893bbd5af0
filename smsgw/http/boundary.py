"""The API's edge against hostile input: whatever arrives at ``/v1/...``, ``/receipts/...`` or
``/inbound/...``, an error answer is our problem details (``application/problem+json``, RFC 9457, with the
earlier envelope ``{"error": {"code", "message", "fields"?}}`` inside: smsgw.http.problems), never a 500 or
an HTML page.

Text that PostgreSQL cannot store is refused here, before any query: a NUL (PostgreSQL rejects ``\\x00`` in
``text`` and in ``jsonb``) or an unpaired UTF-16 surrogate (JSON's ``"\\ud800"`` decodes to one, and psycopg
and sqlite3 cannot encode it to UTF-8). Both were 500s with a traceback, wherever they appeared: a JSON key
or value, a query parameter, a path id, a header, a signed provider callback.

* ``StrictJSONParser`` (DRF's parser for every view): such text anywhere in a body is a 400 naming the
  top-level field; a body nested deeper than ``MAX_JSON_DEPTH`` (or deep enough to exhaust the
  interpreter's recursion limit in ``json.loads``) is a 400 naming ``body``.
* ``ApiBoundaryMiddleware`` (the outermost middleware of both chains, smsgw.http.callback_chain): the
  same check over path ids, query parameters and headers (400 naming the parameter); a declared body
  larger than ``SMSGW_API_MAX_BODY_BYTES`` (``SMSGW_API_MAX_OBJECT_BYTES`` on a /v1 path that takes one
  object, every one but the batch and campaigns: ``max_body_bytes``) is a 413 ``request_too_large``
  before anything parses it (a campaign's CSV upload, multipart POST /v1/campaigns, has its own cap,
  ``SMSGW_CAMPAIGN_MAX_UPLOAD_BYTES``: it is streamed to disk, not read into memory), its bytes read and
  thrown away first when it is not huge (``body_drain``), so that a client still sending it reads the 413
  instead of a reset connection; a chunked body (Django reads none) is a 411; a URL longer than
  ``MAX_URL_BYTES`` is a 414 naming ``url``; and any error response that is not already JSON (Django's
  own 404, 405, 400, 413, 500 pages, the debug pages) is replaced by a problem, so a traceback is never
  shown and a client (or Twilio) always gets the documented shape.

Error messages never echo the offending value (it is hostile, and may be a body or a number).
"""

from __future__ import annotations

import math
import re
import time
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpRequest, HttpResponse, JsonResponse
from rest_framework import exceptions
from rest_framework.parsers import JSONParser

from smsgw.http.problems import PROBLEM_JSON, FieldError, problem
from smsgw.values.digits import is_ascii_digits

# A JSON body deeper than this is refused. Our deepest legitimate input is metadata or quiet_hours inside
# the request object (3 levels); 32 leaves room for tenants' structured metadata and stays far below the
# interpreter's recursion limit (DRF's JSONField and copy.deepcopy recurse too).
MAX_JSON_DEPTH = 32
API_PREFIXES = ("/v1/", "/receipts/", "/inbound/")
API_ROOTS = frozenset({"/v1", "/receipts", "/inbound"})
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
# The longest URL (path and query) the API answers: far beyond any it documents (a cursor is under 100
# characters), below gunicorn's request-line limit (8190, smsgw.runtime.gunicorn_conf) so that the 414 is
# ours; a longer request line gets gunicorn's own 414, in the same envelope (smsgw.runtime.gunicorn_errors).
MAX_URL_BYTES = 8000
# A refused body is read and thrown away before the 413 leaves, up to this size and for at most this long:
# a client that writes the whole body before reading (Python's http.client, many SDKs) otherwise meets a
# closed connection (EPIPE or a reset) and never sees the answer. Past either bound the connection closes
# (gunicorn's own lingering close drains 64 KiB more).
DRAIN_MAX_BYTES = 32 * 1024 * 1024
DRAIN_SECONDS = 5.0
CAMPAIGN_UPLOAD_PATH = "/v1/campaigns"
# The /v1 bodies that are lists of many objects (up to BATCH_MAX_MESSAGES items, a campaign's recipients):
# they get SMSGW_API_MAX_BODY_BYTES. Every other /v1 body is one object, which a valid request keeps far
# below SMSGW_API_MAX_OBJECT_BYTES; a bigger one is refused before it is parsed and walked (a 1 MB body
# cost 74 ms of CPU to refuse after parsing, 50,000 metadata keys 100 ms: docs/benchmarks.md).
BULK_PATHS = frozenset({"/v1/messages/batch", CAMPAIGN_UPLOAD_PATH})
DEFAULT_MAX_OBJECT_BYTES = 64 * 1024

_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")
NUL_OR_SURROGATE = "must not contain NUL characters or unpaired UTF-16 surrogates"
NOT_FINITE = "numbers must be finite (1e400 is out of range)"
NOT_UTF8 = "must be valid UTF-8 (percent-encoded)"

# Error codes for statuses Django (not DRF) answers.
_CODES = {
    400: "bad_request",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    411: "length_required",
    413: "request_too_large",
    414: "url_too_long",
    415: "unsupported_media_type",
    500: "server_error",
}
_MESSAGES = {
    400: "The request could not be read.",
    403: "Forbidden.",
    404: "No such endpoint.",
    405: "Method not allowed.",
    413: "Request body too large.",
    414: "URL too long.",
    415: "Unsupported Content-Type.",
    500: "Internal error. It has been logged; nothing in the request was applied.",
}
# Headers that describe the replaced body; every other header of the original response is kept.
_BODY_HEADERS = frozenset({"content-type", "content-length", "content-language", "content-disposition"})


def is_api_path(path: str) -> bool:
    return path.startswith(API_PREFIXES) or path in API_ROOTS


def is_bad_text(value: str) -> bool:
    return _BAD_TEXT.search(value) is not None


def bad_text_removed(value: str) -> str:
    """``value`` without its NULs and unpaired surrogates: only for text whose exact bytes mean nothing to
    us and that arrived authenticated (a verified provider callback's free-text field)."""
    return _BAD_TEXT.sub("", value)


def first_bad_field(mapping) -> str | None:
    """The first key of a flat str -> str|list[str] mapping (a QueryDict, form params, URL kwargs) whose
    key or value(s) hold a NUL or a surrogate; None if all are clean."""
    items = mapping.lists() if hasattr(mapping, "lists") else mapping.items()
    for key, values in items:
        if not isinstance(values, list | tuple):
            values = [values]
        if is_bad_text(str(key)):
            return "query"
        for value in values:
            if isinstance(value, str) and is_bad_text(value):
                return str(key)
    return None


def json_problem(data) -> tuple[str, str] | None:
    """(field, message) for the first problem in parsed JSON: text PostgreSQL cannot store, or nesting
    deeper than MAX_JSON_DEPTH; the field is the top-level key it sits under (``body`` for the top level
    itself). Iterative, so it never recurses however deep the input."""
    stack: list[tuple[object, str, int]] = [(data, "body", 1)]
    while stack:
        value, field, depth = stack.pop()
        if isinstance(value, str):
            if is_bad_text(value):
                return field, NUL_OR_SURROGATE
            continue
        if isinstance(value, float) and not math.isfinite(value):
            # 1e400 parses to inf: PostgreSQL's jsonb refuses it and the strict renderer cannot write it.
            return field, NOT_FINITE
        if not isinstance(value, dict | list):
            continue
        if depth > MAX_JSON_DEPTH:
            return "body", f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
        if isinstance(value, dict):
            for key, item in value.items():
                if is_bad_text(key):
                    return (field if depth > 1 else "body"), NUL_OR_SURROGATE
                stack.append((item, key if depth == 1 else field, depth + 1))
        else:
            stack.extend((item, field, depth + 1) for item in value)
    return None


def json_too_deep(data) -> bool:
    """Nesting deeper than MAX_JSON_DEPTH anywhere in parsed JSON. Iterative, and needed besides the
    RecursionError guard: how deep json.loads goes before that error depends on the interpreter (Python
    3.13 parses 5,000 levels that 3.12 refuses)."""
    stack: list[tuple[object, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_JSON_DEPTH:
                return True
            items = value.values() if isinstance(value, dict) else value
            stack.extend((item, depth + 1) for item in items)
    return False


class StrictJSONParser(JSONParser):
    """DRF's JSON parser, plus: deep nesting and unstorable text are 400s naming the field."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            # json.loads recurses once per level: 100,000 levels exhaust the stack (a 500 before).
            raise exceptions.ParseError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
        problem = json_problem(data)
        if problem is not None:
            field, message = problem
            if field == "body":
                raise exceptions.ParseError(message)
            raise exceptions.ValidationError({field: [message]})
        return data


def envelope(
    status: int,
    message: str,
    *,
    code: str | None = None,
    fields: dict | None = None,
    extra: dict | None = None,
) -> JsonResponse:
    """A problem (smsgw.http.problems) as a response. ``fields``: what to correct, ``{field: [(code,
    message), ...]}``; ``extra``: e.g. database_unavailable's retry_after (smsgw.http.unavailable)."""
    code = code or _CODES.get(status, "error")
    errors = [FieldError(f, c, m) for f, pairs in (fields or {}).items() for c, m in pairs]
    body = problem(status, code, message, errors=errors, extra=extra)
    return JsonResponse(
        body, status=status, content_type=PROBLEM_JSON, json_dumps_params={"separators": (",", ":")}
    )


def _field_error(field: str, message: str, status: int = 400, code: str = "invalid") -> JsonResponse:
    # The field's code: the refusal's own (request_too_large, ...), or "invalid" for a 400.
    return envelope(status, f"{field}: {message}", code=code, fields={field: [(code, message)]})


def max_body_bytes(request: HttpRequest | None = None) -> int:
    """The body cap of ``request`` (without one: the general cap, ``SMSGW_API_MAX_BODY_BYTES``). A
    single-object /v1 body has the smaller ``SMSGW_API_MAX_OBJECT_BYTES``; the batch and a campaign's
    JSON the general one; a campaign's CSV upload (multipart POST /v1/campaigns) its own, larger one."""
    general = int(getattr(settings, "API_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES))
    if request is None:
        return general
    path = request.path_info
    if (
        path == CAMPAIGN_UPLOAD_PATH
        and request.method == "POST"
        and request.META.get("CONTENT_TYPE", "").lower().startswith("multipart/form-data")
    ):
        return int(settings.CAMPAIGN_MAX_UPLOAD_BYTES)
    if path.startswith("/v1/") and path not in BULK_PATHS:
        return min(general, int(getattr(settings, "API_MAX_OBJECT_BYTES", DEFAULT_MAX_OBJECT_BYTES)))
    return general


def declared_length(request: HttpRequest) -> int | None:
    """The body's Content-Length as a number (0 without one); None when it is not a whole number."""
    raw = request.META.get("CONTENT_LENGTH") or "0"
    if len(raw) > 18 or not is_ascii_digits(raw):
        return None
    return int(raw)


def body_drain(request: HttpRequest, length: int) -> None:
    """Read and discard a refused body of ``length`` bytes, within DRAIN_MAX_BYTES and DRAIN_SECONDS."""
    if length > DRAIN_MAX_BYTES:
        return
    deadline = time.monotonic() + DRAIN_SECONDS
    left = length
    try:
        while left > 0 and time.monotonic() < deadline:
            chunk = request.read(min(left, 64 * 1024))
            if not chunk:
                return
            left -= len(chunk)
    except OSError:  # UnreadablePostError: the client went away; nothing to answer
        return


def body_too_large(request: HttpRequest, limit: int) -> bool:
    """The declared body is larger than ``limit``: it is drained (``body_drain``) and True is returned,
    for the caller to answer 413 in its own shape."""
    length = declared_length(request) or 0
    if length <= limit:
        return False
    body_drain(request, length)
    return True


def _header_name(meta_key: str) -> str:
    return "-".join(part.capitalize() for part in meta_key.removeprefix("HTTP_").split("_"))


def _bad_header(meta: dict) -> str | None:
    for key, value in meta.items():
        is_header = key.startswith("HTTP_") or key in ("CONTENT_TYPE", "CONTENT_LENGTH")
        if is_header and isinstance(value, str) and is_bad_text(value):
            return _header_name(key)
    return None


def not_utf8_field(query_string: str) -> str | None:
    """Django decodes a query string (or a form body) leniently (invalid UTF-8 becomes U+FFFD, so a filter
    silently matches nothing); the parameter whose raw bytes are not UTF-8 is named instead. The text is
    as WSGI gives it, one character per byte received."""
    if "%" not in query_string and query_string.isascii():
        return None
    try:
        raw = query_string.encode("iso-8859-1")  # PEP 3333: the bytes as received, one char per byte
    except UnicodeEncodeError:
        raw = query_string.encode("utf-8")
    for pair in raw.split(b"&"):
        key, _, value = pair.partition(b"=")
        try:
            name = unquote_to_bytes(key.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            return "query"
        try:
            unquote_to_bytes(value.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            return name if not is_bad_text(name) else "query"
    return None


def is_json(response: HttpResponse) -> bool:
    return response.get("Content-Type", "").split(";")[0].strip() in ("application/json", PROBLEM_JSON)


def logged_as(original: HttpResponse, replacement: HttpResponse) -> HttpResponse:
    """Django logs an error response once (django.request); without this the replacement, which it has
    not seen, is logged a second time."""
    if getattr(original, "_has_been_logged", False):
        replacement._has_been_logged = True  # type: ignore[attr-defined]  # private mark, not in the stubs
    return replacement


class ApiBoundaryMiddleware:
    """Installed first in MIDDLEWARE, so it also sees the responses Django builds for exceptions raised
    anywhere inside (``convert_exception_to_response`` wraps every layer)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not is_api_path(request.path_info):
            return self.get_response(request)
        early = self._refuse_early(request)
        response = early if early is not None else self.get_response(request)
        if response.status_code >= 400 and not is_json(response):
            if response.status_code == 404 and is_bad_text(request.path_info):
                return _field_error("path", NUL_OR_SURROGATE)  # no route matched the hostile path
            response = self._as_envelope(response)
        return response

    def _refuse_early(self, request: HttpRequest) -> HttpResponse | None:
        if declared_length(request) is None:
            return _field_error("Content-Length", "must be a whole number of bytes")
        if "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
            # Django reads a body by its Content-Length only: a chunked one would be read as empty.
            message = "send the body with a Content-Length (a chunked body is not read)"
            return _field_error("Content-Length", message, 411, code="length_required")
        limit = max_body_bytes(request)
        if body_too_large(request, limit):
            return _field_error(
                "body", f"request bodies are at most {limit} bytes", 413, code="request_too_large"
            )
        # PEP 3333: PATH_INFO and QUERY_STRING hold one character per byte received.
        url_bytes = len(request.META.get("PATH_INFO", "")) + 1 + len(request.META.get("QUERY_STRING", ""))
        if url_bytes > MAX_URL_BYTES:
            return _field_error("url", f"URLs are at most {MAX_URL_BYTES} bytes", 414, code="url_too_long")
        header = _bad_header(request.META)
        if header is not None:
            return _field_error(header, NUL_OR_SURROGATE)
        field = not_utf8_field(request.META.get("QUERY_STRING", ""))
        if field is not None:
            return _field_error(field, NOT_UTF8)
        field = first_bad_field(request.GET)
        if field is not None:
            return _field_error(field, NUL_OR_SURROGATE)
        return None

    def process_view(self, request, view_func, view_args, view_kwargs):
        if not is_api_path(request.path_info):
            return None
        field = first_bad_field(view_kwargs)
        if field is not None:
            return _field_error(field, NUL_OR_SURROGATE)
        if is_bad_text(request.path_info):
            return _field_error("path", NUL_OR_SURROGATE)
        return None

    def process_exception(self, request, exception):
        """Django's own limits on a form body (DATA_UPLOAD_MAX_NUMBER_FIELDS, ..._MEMORY_SIZE) raised where
        a view reads ``request.POST``: the field is the body."""
        if not is_api_path(request.path_info):
            return None
        if isinstance(exception, RequestDataTooBig):
            return _field_error("body", "request body too large", 413, code="request_too_large")
        if isinstance(exception, TooManyFieldsSent | TooManyFilesSent):
            return _field_error("body", "too many form fields")
        return None

    def _as_envelope(self, response: HttpResponse) -> HttpResponse:
        status = response.status_code
        replacement = envelope(status, _MESSAGES.get(status, "Request failed."))
        for name, value in response.headers.items():
            if name.lower() not in _BODY_HEADERS:  # Allow, Retry-After, RateLimit-*, Vary, ...
                replacement[name] = value
        return logged_as(response, replacement)
