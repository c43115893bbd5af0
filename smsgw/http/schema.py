"""The OpenAPI contract's shared parts: the bearer scheme, the problem details (RFC 9457, with the earlier
envelope inside: smsgw.http.problems) and the error responses every operation can give, answered as
``application/problem+json`` (or ``application/json``: smsgw.http.negotiation), the ``Request-Id`` header
of every answer, and the page shape of cursor-paginated lists.

``ApiAutoSchema`` (REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]) adds to each operation the errors that follow
from its shape, so a view declares only the ones particular to it (409, 422, 403, the quota 429):
- 401, 429 (``rate_limited``) and 503 (``database_unavailable``) on every authenticated operation (the
  API key is looked up in the database), and 403 (``missing_scope``) with the scope the operation needs,
  also stated in its description and its ``x-required-scopes`` (smsgw.tenancy.permissions);
- 400 where there is a request body, a query parameter or a request header to get wrong;
- 404 where the path names an object by id;
- 413 and 415 where there is a request body;
- 414 on every operation (a URL past smsgw.http.boundary.MAX_URL_BYTES).
tests/smsgw/http/test_openapi_contract.py checks real responses against the result. Each operation's
operationId comes from the table in smsgw.http.operation_ids, not from the view's name."""

from __future__ import annotations

import re

from drf_spectacular.drainage import warn
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, inline_serializer
from rest_framework import serializers

from smsgw.http.negotiation import JSON
from smsgw.http.operation_ids import OPERATION_IDS
from smsgw.http.problems import PROBLEM_JSON, TITLES, FieldError, problem
from smsgw.tenancy.permissions import operation_scope


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "smsgw.tenancy.auth.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "sk_<prefix>_<secret>",
            "description": "`Authorization: Bearer sk_<prefix>_<secret>`. The key names the tenant; every "
            "object another tenant owns answers 404.",
        }


class ErrorExtras(serializers.Serializer):
    """The members some codes add, in the envelope and in the problem alike (smsgw.http.errors)."""

    quota = serializers.CharField(required=False, help_text="quota_exceeded only: which quota.")
    limit = serializers.IntegerField(required=False, help_text="quota_exceeded only: the quota's size.")
    used = serializers.IntegerField(required=False, help_text="quota_exceeded only: how much is used.")
    requested = serializers.IntegerField(
        required=False, help_text="quota_exceeded only: how much this request needed."
    )
    resets_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="quota_exceeded only: when the quota resets."
    )
    required_scope = serializers.CharField(
        required=False, help_text="missing_scope only: the scope the API key lacks (docs/api.md#scopes)."
    )
    retry_after = serializers.IntegerField(
        required=False, help_text="503 only: seconds to wait before retrying, as in `Retry-After`."
    )


class ErrorDetail(ErrorExtras):
    code = serializers.CharField(
        help_text="Machine-readable: invalid, malformed_request, not_authenticated, authentication_failed, "
        "permission_denied, missing_scope, not_found, conflict, idempotency_key_reused, request_too_large, "
        "unsupported_media_type, quota_exceeded, rate_limited, database_unavailable, ..."
    )
    message = serializers.CharField(help_text="For a person; for a 400, names the first field to correct.")
    status = serializers.CharField(required=False, help_text="409 only: the object's current status.")

    def get_fields(self):
        fields = super().get_fields()
        # "fields" is an attribute of every serializer, so it cannot be declared on the class.
        fields["fields"] = serializers.DictField(
            child=serializers.ListField(child=serializers.CharField()),
            required=False,
            help_text="400: each field to correct (a body key, a query parameter or a header) and why.",
        )
        return fields


class FieldProblem(serializers.Serializer):
    field = serializers.CharField(
        help_text="As the request spells it: a body key (dotted when nested), a query parameter or a header."
    )
    code = serializers.CharField(
        help_text="Why, machine-readable: required, invalid, max_length, invalid_choice, invalid_timezone, "
        "... (docs/errors.md, field error codes)."
    )
    detail = serializers.CharField(help_text="Why, for a person. It does not repeat the value given.")


class ItemProblem(ErrorExtras):
    """Problem details (RFC 9457) without the envelope and the request id: a batch item's refusal."""

    type = serializers.CharField(
        help_text="A URI reference to the code's entry in the error catalogue (docs/errors.md): "
        "`SMSGW_ERROR_DOCS_URL` (default `/docs/errors/`) and `#<code>`. Switch on `code`, not on this."
    )
    title = serializers.CharField(help_text="The code's short summary, the same for each occurrence.")
    status = serializers.IntegerField(help_text="The HTTP status.")
    detail = serializers.CharField(help_text="This occurrence, for a person; a 400 names the first field.")
    code = serializers.ChoiceField(choices=sorted(TITLES), help_text="Machine-readable (docs/errors.md).")
    current_status = serializers.CharField(required=False, help_text="409 only: the object's current status.")

    def get_fields(self):
        fields = super().get_fields()
        # "errors" is an attribute of every serializer, so it cannot be declared on the class.
        fields["errors"] = FieldProblem(
            many=True, required=False, help_text="400: each field to correct, with its own code."
        )
        return fields


class Problem(ItemProblem):
    request_id = serializers.CharField(
        required=False, help_text="The answer's `Request-Id`: quote it to the operator."
    )
    error = ErrorDetail(
        help_text="The envelope of earlier versions, kept for the clients that read it: `code`, `message` "
        "(the same as `detail`), `fields` ({field: [detail]}) and the code's extra members."
    )


def _example(name: str, http_status: int, code: str, message: str, **extra) -> OpenApiExample:
    """An error example as the API answers it (smsgw.http.problems.problem, without a request id)."""
    fields = extra.pop("fields", None) or {}
    errors = [FieldError(f, c, m) for f, pairs in fields.items() for c, m in pairs]
    body = problem(http_status, code, message, errors=errors, extra=extra, with_request_id=False)
    return OpenApiExample(
        name, value=body, response_only=True, status_codes=[str(http_status)], media_type=None
    )


problem_example = _example


def error(http_status: int, description: str, *examples: OpenApiExample) -> OpenApiResponse:
    return OpenApiResponse(Problem, description=description, examples=list(examples))


_INVALID_FIELD = _example(
    "Invalid field",
    400,
    "invalid",
    "timezone: unknown timezone; expected an IANA name such as 'UTC'",
    fields={"timezone": [("invalid_timezone", "unknown timezone; expected an IANA name such as 'UTC'")]},
)
_MALFORMED = _example(
    "Malformed JSON",
    400,
    "malformed_request",
    "JSON parse error - Expecting value: line 1 column 1 (char 0)",
    fields={"body": [("malformed_request", "JSON parse error - Expecting value: line 1 column 1 (char 0)")]},
)
_BAD_QUERY = _example(
    "Invalid query parameter",
    400,
    "invalid",
    "page_size: must be a whole number from 1 to 500",
    fields={"page_size": [("invalid", "must be a whole number from 1 to 500")]},
)
_BAD_400 = "Invalid input: `fields` names each {} to correct. Nothing was changed."
BAD_BODY = error(400, _BAD_400.format("body key (or header)"), _INVALID_FIELD, _MALFORMED)
BAD_QUERY = error(400, _BAD_400.format("query parameter (`cursor`, `page_size`, `to`, ...)"), _BAD_QUERY)
BAD_PATH = error(
    400,
    _BAD_400.format("path parameter"),
    _example(
        "Invalid sender",
        400,
        "invalid",
        "sender: not a sender",
        fields={"sender": [("invalid", "not a sender")]},
    ),
)
UNAUTHENTICATED = error(
    401,
    "No API key, a malformed, unknown or revoked one, or a disabled tenant. The answer carries "
    "`WWW-Authenticate: Bearer`.",
    _example("Unknown key", 401, "authentication_failed", "Unknown API key."),
)
_MISSING_SCOPE = _example(
    "Missing scope",
    403,
    "missing_scope",
    "This API key lacks the scope 'messages:send', which POST /v1/messages needs.",
    required_scope="messages:send",
)
MISSING_SCOPE = error(
    403,
    "The API key lacks the scope this operation needs (`required_scope` names it). Nothing was changed.",
    _MISSING_SCOPE,
)
FORBIDDEN = error(
    403,
    "The object exists but is not this tenant's to change; or (`missing_scope`) the API key lacks the "
    "scope this operation needs.",
    _example(
        "Not yours",
        403,
        "permission_denied",
        "This sender's rate is set by the operator or another tenant.",
    ),
    _MISSING_SCOPE,
)
NOT_FOUND = error(
    404,
    "No such object for this tenant (another tenant's object is a 404 too).",
    _example("Unknown id", 404, "not_found", "No message with this id."),
)
CONFLICT = error(
    409,
    "The message's current status does not allow this; `status` gives it. Nothing was changed.",
    _example(
        "Too late to cancel",
        409,
        "conflict",
        "Too late to cancel: the message is already sent.",
        status="sent",
    ),
)
SCHEDULE_CONFLICT = error(
    409,
    "The schedule's current status does not allow this; `status` gives it. Nothing was changed.",
    _example(
        "Cancelled schedule",
        409,
        "conflict",
        "A cancelled schedule cannot be changed.",
        status="cancelled",
    ),
)
IDEMPOTENCY_MISMATCH = error(
    422,
    "The `Idempotency-Key` was already used with a different body. Nothing was stored.",
    _example(
        "Key reused",
        422,
        "idempotency_key_reused",
        "This Idempotency-Key was already used with a different request body; use a new key for a "
        "different message.",
    ),
)
TOO_LARGE = error(
    413,
    "The request body is larger than the API accepts. Nothing was stored.",
    _example("Too large", 413, "request_too_large", "The request body is too large."),
)
URL_TOO_LONG = error(
    414,
    "The URL (path and query) is longer than 8,000 bytes. Nothing was read or stored.",
    _example(
        "URL too long",
        414,
        "url_too_long",
        "url: URLs are at most 8000 bytes",
        fields={"url": [("url_too_long", "URLs are at most 8000 bytes")]},
    ),
)
UNSUPPORTED_MEDIA_TYPE = error(
    415,
    "The body is not `application/json`.",
    _example("Not JSON", 415, "unsupported_media_type", 'Unsupported media type "text/plain" in request.'),
)
_RATE_LIMITED = _example(
    "Rate limited", 429, "rate_limited", "Too many requests for this API key; retry after 1 s."
)
RATE_LIMITED = error(
    429,
    "Too many requests for this API key (shared by every web process). Wait `Retry-After` seconds; "
    "`RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` and `RateLimit-Policy` describe the "
    "bucket (they are on every answer to a key).",
    _RATE_LIMITED,
)
QUOTA_OR_RATE_LIMITED = error(
    429,
    "`quota_exceeded`: accepting this would exceed a tenant quota (`quota` names it; `limit`, `used` and "
    "`resets_at` say by how much and until when). Nothing was stored. Or `rate_limited`, as on every "
    "operation.",
    _example(
        "Quota exceeded",
        429,
        "quota_exceeded",
        "Daily message quota of 1000 segments reached; it resets at 2026-12-02T05:00:00Z.",
        quota="daily_message_quota",
        limit=1000,
        used=999,
        requested=2,
        resets_at="2026-12-02T05:00:00Z",
    ),
    _RATE_LIMITED,
)
DATABASE_UNAVAILABLE = error(
    503,
    "The database is unavailable (an outage, a restart, a failover): wait `Retry-After` seconds (also "
    "`retry_after`) and send the same request again. Nothing was stored, unless the connection was lost "
    "while the request's changes were being committed: a message or campaign sent again with the same "
    "`Idempotency-Key` is stored at most once either way.",
    _example(
        "Database unavailable",
        503,
        "database_unavailable",
        "The database is unavailable; retry in 5 s.",
        retry_after=5,
    ),
)


def request_id_headers() -> list[OpenApiParameter]:
    """The headers every answer carries (smsgw.http.request_id; traceparent: smsgw.tracing.web)."""
    return [
        OpenApiParameter(
            "Request-Id",
            str,
            OpenApiParameter.HEADER,
            response=True,
            required=True,
            pattern=r"^[A-Za-z0-9._:-]{1,128}$",
            description="This request's id (`req_` and 32 hex digits, or the caller's own `Request-Id` or "
            "`X-Request-Id` when it is 1-128 characters of `A-Z a-z 0-9 . _ : -`). It is in every log line "
            "of the request and in an error's `request_id`: quote it when asking about a request.",
        ),
        OpenApiParameter(
            "traceparent",
            str,
            OpenApiParameter.HEADER,
            response=True,
            required=False,
            pattern=r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$",
            description="W3C Trace Context (docs/observability.md): with tracing on, this request's span, "
            "in the caller's trace when the request sent a `traceparent`; with tracing off, the caller's own "
            "`traceparent` answered back; absent otherwise.",
        ),
    ]


# Every answer to a key carries the key's rate-limit state; a 429 or a 503 also says when to come back.
RATE_LIMIT_HEADERS = [
    OpenApiParameter(
        "Retry-After",
        int,
        OpenApiParameter.HEADER,
        response=[429, 503],
        description="Seconds to wait (a quota refusal sends it only when waiting helps).",
    ),
    OpenApiParameter(
        "RateLimit-Limit", int, OpenApiParameter.HEADER, response=True, description="The key's burst."
    ),
    OpenApiParameter(
        "RateLimit-Remaining", int, OpenApiParameter.HEADER, response=True, description="Requests left now."
    ),
    OpenApiParameter(
        "RateLimit-Reset",
        int,
        OpenApiParameter.HEADER,
        response=True,
        description="Seconds until the bucket is full again.",
    ),
    OpenApiParameter(
        "RateLimit-Policy",
        str,
        OpenApiParameter.HEADER,
        response=True,
        description="`<burst>;w=<seconds>`.",
    ),
]


def idempotent_replayed(*codes: int) -> OpenApiParameter:
    return OpenApiParameter(
        "Idempotent-Replayed",
        str,
        OpenApiParameter.HEADER,
        response=list(codes),
        enum=["true"],
        description="`true` when this is the stored answer to an earlier request with the same "
        "`Idempotency-Key` (nothing new was made); absent otherwise.",
    )


def location(*codes: int, what: str) -> OpenApiParameter:
    return OpenApiParameter(
        "Location",
        str,
        OpenApiParameter.HEADER,
        response=list(codes),
        description=f"The {what}'s URL (a path: `/v1/...`).",
    )


def paginated(serializer: type[serializers.Serializer], name: str):
    """The page a CursorPagination answers: ``{next, previous, results}``."""
    return inline_serializer(
        name,
        {
            "next": serializers.URLField(allow_null=True, help_text="The next page's URL; null on the last."),
            "previous": serializers.URLField(allow_null=True, help_text="The previous page's URL, or null."),
            "results": serializer(many=True),
        },
    )


class ApiAutoSchema(AutoSchema):
    def get_operation_id(self) -> str:
        # Written out, not derived from the view (smsgw.http.operation_ids says why).
        if self._mocked():  # a webhook's: named by its extend_schema (receipts.webhook_schema.notification)
            return super().get_operation_id()
        try:
            return OPERATION_IDS[(self.path, self.method)]
        except KeyError:
            warn(f"{self.method} {self.path} has no operationId in smsgw.http.operation_ids.OPERATION_IDS")
            return super().get_operation_id()

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if direction == "request":  # a webhook's (SPECTACULAR_SETTINGS["WEBHOOKS"]): the receiver's answers
            return responses
        for code, response in self._implied_errors().items():
            if str(code) not in responses:
                responses[str(code)] = self._get_response_for_code(response, str(code), direction=direction)
        return dict(sorted(responses.items()))

    def get_operation(self, *args, **kwargs):
        operation = super().get_operation(*args, **kwargs)
        scope = operation_scope(self.view, self.method) if self._authenticated() else None
        if operation is not None and scope:
            operation["x-required-scopes"] = [scope]
            lead = operation.get("description", "")
            operation["description"] = f"{lead}\n\nRequires the scope `{scope}`.".strip()
        return operation

    def get_override_parameters(self):
        params = [*super().get_override_parameters(), *request_id_headers()]
        if self._authenticated():
            params = [*params, *RATE_LIMIT_HEADERS]
        return params

    def _get_response_for_code(self, serializer, status_code, media_types=None, direction="response"):
        if media_types is None and int(status_code) >= 400:
            # An error is problem details; the same body as application/json to a client that prefers it.
            media_types = [PROBLEM_JSON, JSON]
        return super()._get_response_for_code(serializer, status_code, media_types, direction)

    def _authenticated(self) -> bool:
        # A webhook is described by a view drf-spectacular makes (plumbing.build_mocked_view): smsgw calls it.
        return bool(self.view.get_authenticators()) and not self._mocked()

    def _mocked(self) -> bool:
        return type(self.view).__module__ == "drf_spectacular.plumbing"

    def _implied_errors(self) -> dict[int, OpenApiResponse]:
        errors: dict[int, OpenApiResponse] = {}
        has_body = self.method in ("POST", "PUT", "PATCH") and self.get_request_serializer() is not None
        inputs = (OpenApiParameter.QUERY, OpenApiParameter.HEADER)
        has_input = any(
            isinstance(p, OpenApiParameter) and p.location in inputs and not p.response
            for p in self.get_override_parameters()
        )
        if has_body:
            errors[400] = BAD_BODY
        elif has_input:
            errors[400] = BAD_QUERY
        if self._authenticated():
            errors[401] = UNAUTHENTICATED
            errors[403] = MISSING_SCOPE
            errors[429] = RATE_LIMITED
            errors[503] = DATABASE_UNAVAILABLE
        if re.search(r"\{\w*id\}", self.path):
            errors[404] = NOT_FOUND
        errors[414] = URL_TOO_LONG
        if has_body:
            errors[413] = TOO_LARGE
            errors[415] = UNSUPPORTED_MEDIA_TYPE
        return errors


PAGE_PARAMETERS = [
    OpenApiParameter(
        "cursor", str, description="Opaque: the `next` or `previous` URL of a page carries it. Else 400."
    ),
    OpenApiParameter("page_size", int, description="1-500, default 50. Else 400 naming `page_size`."),
]
