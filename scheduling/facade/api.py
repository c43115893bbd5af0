"""The Twilio-compatible Messages API's views (docs/coming-from-twilio.md). Thin: authenticate as Twilio's
SDKs do (HTTP Basic), hand the request to ``requests`` and the message services, answer in Twilio's
shapes (``resources``). Plain Django views: Twilio's form bodies, errors and paging, not DRF's."""

from __future__ import annotations

import base64
import binascii
import math
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import AuthenticationFailed

from scheduling.facade import requests as facade
from scheduling.facade.resources import TwilioError, message_resource, messages_path, public_id_of
from scheduling.limits import ratelimit
from scheduling.messages import final, service
from scheduling.messages.selectors import message_page
from scheduling.models import Message, Status
from smsgw import stages
from smsgw.domain_errors import ConflictError, DomainError, NotFoundError
from smsgw.http.boundary import body_too_large, first_bad_field, max_body_bytes, not_utf8_field
from smsgw.models import ApiKey, Tenant
from smsgw.observability import events
from smsgw.tenancy.auth import basic_verify
from smsgw.tenancy.scopes import scopes_grant
from smsgw.values.digits import ascii_int

MAX_PAGE_SIZE = 1000  # Twilio's PageSize ceiling
DEFAULT_PAGE_SIZE = 50
MAX_PAGE = 10**9  # a Page past this is no page anyone reached by next_page_uri
_INT64_MAX = 2**63 - 1
LIST_PARAMS = frozenset(("To", "From", "DateSent", "DateSent<", "DateSent>", "PageSize", "Page", "PageToken"))


def _error(err: TwilioError) -> JsonResponse:
    response = JsonResponse(err.body(), status=err.status)
    for name, value in err.headers.items():
        response[name] = value
    return response


def _authenticate(request: HttpRequest, account_sid: str) -> tuple[Tenant, ApiKey]:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, raw = header.partition(" ")
    challenge = {"WWW-Authenticate": 'Basic realm="smsgw"'}
    if scheme.lower() != "basic":
        raise TwilioError(401, 20003, "Authenticate", challenge)
    try:
        username, _, password = base64.b64decode(raw.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise TwilioError(401, 20003, "Authenticate", challenge) from None
    try:
        key = basic_verify(username, password)
    except AuthenticationFailed as exc:
        raise TwilioError(401, 20003, f"Authentication Error - {exc.detail}", challenge) from None
    tenant = key.tenant
    if account_sid != tenant.facade_account_sid:
        raise TwilioError(404, 20404, f"The requested resource {request.path} was not found")
    rate, burst = ratelimit.limits_for(tenant)
    if rate > 0:
        outcome = ratelimit.take(key.prefix, rate=rate, burst=burst)
        if outcome is not None and not outcome.allowed:
            events.rate_limited()
            wait = str(max(1, math.ceil(outcome.retry_after)))
            raise TwilioError(429, 20429, "Too Many Requests", {"Retry-After": wait})
    return tenant, key


def _require(key: ApiKey, scopes: list[str]) -> None:
    """403 in Twilio's form naming the first scope (smsgw.tenancy.scopes) the key lacks."""
    for scope in scopes:
        if not scopes_grant(key.scopes, scope):
            raise TwilioError(403, 20403, f"Forbidden: this API key lacks the scope {scope!r}")


def _message_scopes(request: HttpRequest) -> list[str]:
    """What an operation on one message needs, checked before the message is looked up (a key without
    them cannot tell which SIDs exist). A POST cancels (``Status``), redacts (``Body``) or both; one with
    neither is refused (400) once the check has passed."""
    if request.method == "GET":
        return ["messages:read"]
    if request.method == "DELETE":
        return ["messages:delete"]
    if request.method == "POST":
        params = _params(request, "POST")
        scopes = ["messages:cancel"] * ("Status" in params) + ["messages:delete"] * ("Body" in params)
        return scopes or ["messages:cancel"]
    raise TwilioError(405, 20004, "Method not allowed")


def _params(request: HttpRequest, which: str):
    """The form body (POST) or the query string (GET), refused in Twilio's form when Django's own limits
    on a form are passed, a parameter is given twice (which one was meant?), its bytes are not UTF-8
    (Django would store U+FFFD in their place) or a value holds a NUL or an unpaired surrogate (no
    database column takes it)."""
    form = which == "POST" and request.content_type == "application/x-www-form-urlencoded"
    try:
        # The raw text first: once request.POST has read a multipart body, request.body cannot be read.
        raw = request.body.decode("iso-8859-1") if form else request.META.get("QUERY_STRING", "")
        params = request.POST if which == "POST" else request.GET
    except RequestDataTooBig:
        raise TwilioError(413, 20001, "Request body too large") from None
    except (TooManyFieldsSent, TooManyFilesSent):
        raise TwilioError(400, 20001, "Too many parameters") from None
    bad = not_utf8_field(raw) if form or which == "GET" else None
    if bad is not None:
        raise TwilioError(400, 20001, f"Parameter {bad[:64]!r} is not valid UTF-8 (percent-encoded)")
    twice = next((name for name, values in params.lists() if len(values) > 1), None)
    if twice is not None:
        raise TwilioError(400, 20001, f"Parameter {twice[:64]!r} is given more than once")
    bad = first_bad_field(params)
    if bad is not None:
        raise TwilioError(400, 20001, f"Parameter {bad!r} holds a NUL character or an unpaired surrogate")
    return params


def _body_checked(request: HttpRequest) -> None:
    """Before authentication: a body over the API's cap is a 413, read and thrown away first so that a
    client still sending it reads the answer (smsgw.http.boundary.body_drain)."""
    if request.method == "POST" and body_too_large(request, max_body_bytes()):
        raise TwilioError(413, 20001, f"Request bodies are at most {max_body_bytes()} bytes")


def _actor(key: ApiKey) -> str:
    return f"apikey:{key.prefix}"


def _unknown(params, known: frozenset[str]) -> None:
    unknown = sorted(set(params) - known)
    if unknown:
        raise TwilioError(400, 20001, f"Unknown parameter {unknown[0]!r}")


@csrf_exempt
def messages(request: HttpRequest, account_sid: str) -> HttpResponse:
    """``POST`` creates (now or at ``SendAt``); ``GET`` lists, newest first, in Twilio's pages."""
    try:
        _body_checked(request)
        tenant, key = _authenticate(request, account_sid)
        if request.method == "POST":
            _require(key, ["messages:send"])
            return _create(request, tenant, key)
        if request.method == "GET":
            _require(key, ["messages:read"])
            return _list(request, tenant)
        raise TwilioError(405, 20004, "Method not allowed")
    except TwilioError as err:
        return _error(err)


def _create(request: HttpRequest, tenant: Tenant, key: ApiKey) -> HttpResponse:
    params = _params(request, "POST")
    _unknown(params, facade.CREATE_PARAMS)
    data = facade.create_data(tenant, params, request.headers)
    idempotency_key = request.headers.get("Idempotency-Key") or request.headers.get(
        "I-Twilio-Idempotency-Token"
    )
    try:
        message, _created = service.message_create(
            tenant=tenant, actor=_actor(key), data=data, idempotency_key=idempotency_key or None
        )
    except DomainError as exc:
        raise facade.twilio_error(exc, data) from None
    return JsonResponse(message_resource(message, tenant.facade_account_sid), status=201)


def _message(tenant: Tenant, sid: str, path: str, *, moved: bool = False) -> Message:
    """The tenant's message by its SID; ``moved``: also one that has moved to history (final long ago:
    it can be fetched, redacted and deleted; a cancel is a 409, as for any final message)."""
    public_id = public_id_of(sid)
    message = (
        Message.objects.filter(tenant=tenant, public_id=public_id, deleted_at__isnull=True).first()
        if public_id
        else None
    )
    if message is None and public_id and moved:
        message = stages.message_history().message(tenant_id=tenant.pk, public_id=public_id)
    if message is None:
        raise TwilioError(404, 20404, f"The requested resource {path} was not found")
    return message


@csrf_exempt
def message(request: HttpRequest, account_sid: str, sid: str) -> HttpResponse:
    """``GET`` fetches; ``POST`` cancels (``Status=canceled``) or redacts (``Body=``); ``DELETE``."""
    try:
        _body_checked(request)
        tenant, key = _authenticate(request, account_sid)
        _require(key, _message_scopes(request))
        current = _message(tenant, sid, request.path, moved=True)
        if request.method == "GET":
            return JsonResponse(message_resource(current, account_sid))
        if request.method == "POST":
            return _update(request, tenant, key, current)
        if request.method == "DELETE":
            _delete(tenant, key, current)
            return HttpResponse(status=204)
        raise TwilioError(405, 20004, "Method not allowed")
    except TwilioError as err:
        return _error(err)


def _update(request: HttpRequest, tenant: Tenant, key: ApiKey, current: Message) -> HttpResponse:
    params = _params(request, "POST")
    _unknown(params, frozenset(("Status", "Body")))
    status, body = params.get("Status"), params.get("Body")
    if status is None and body is None:
        raise TwilioError(400, 20001, "Nothing to update: give Status=canceled or Body= (empty) to redact")
    if status is not None and status != "canceled":
        raise TwilioError(400, 20001, "Status can only be updated to 'canceled'")
    if body is not None and body != "":
        raise TwilioError(400, 20001, "Body can only be updated to an empty string (redaction)")
    try:
        if status == "canceled":
            if getattr(current, "history_events", None) is not None:  # moved: final long ago
                raise ConflictError("It is final", current_status=current.status)
            if tenant.facade_strict and current.status != Status.SCHEDULED:
                raise ConflictError("Too late to cancel", current_status=current.status)
            current = service.message_cancel(tenant=tenant, public_id=current.public_id, actor=_actor(key))
        if body == "":
            current = final.message_redact(tenant=tenant, public_id=current.public_id, actor=_actor(key))
    except ConflictError as exc:
        if status == "canceled" and body is None:
            raise TwilioError(
                409, 30409, f"This message cannot be canceled: it is already {exc.current_status}"
            ) from None
        raise TwilioError(400, 20009, str(exc)) from None
    except NotFoundError:
        raise TwilioError(404, 20404, f"The requested resource {request.path} was not found") from None
    return JsonResponse(message_resource(current, tenant.facade_account_sid))


def _delete(tenant: Tenant, key: ApiKey, current: Message) -> None:
    try:
        final.message_delete(tenant=tenant, public_id=current.public_id, actor=_actor(key))
    except ConflictError as exc:
        raise TwilioError(
            400, 20009, f"Cannot delete message because delivery has not been completed: {exc}"
        ) from None


def _bound(name: str, raw: str) -> tuple[datetime, datetime]:
    """(first, last instant) a DateSent value covers: a whole UTC day for ``YYYY-MM-DD``, else the second."""
    value = raw.strip()
    try:
        if len(value) == 10:
            first, span = datetime.fromisoformat(value).replace(tzinfo=UTC), timedelta(days=1)
        else:
            if len(value) > 19 and value[-6] == " ":  # an unencoded "+" of "+00:00"
                value = value[:-6] + "+" + value[-5:]
            first, span = datetime.fromisoformat(value.replace("Z", "+00:00")), timedelta(seconds=1)
            if first.tzinfo is None:
                first = first.replace(tzinfo=UTC)
        # In UTC, as the database compares them: year 1 with a positive offset falls off datetime's range
        # (an OverflowError, a 500 before), as would the day after 9999-12-31.
        first = first.astimezone(UTC)
        return first, first + (span - timedelta(microseconds=1))
    except (ValueError, OverflowError):
        raise TwilioError(400, 20001, f"Invalid {name}: {raw[:64]!r}") from None


def _filtered(tenant: Tenant, q) -> tuple[dict[str, Any], list[tuple[str, str]], int | None]:
    """The list's filters as lookups on the columns the live table and history share, the filters as
    given (for the page URIs), and the PageToken's id."""
    lookups: dict[str, Any] = {}
    filters: list[tuple[str, str]] = []
    if "To" in q:
        lookups["to"] = facade.normalized_to(q["To"])
        filters.append(("To", q["To"]))
    if "From" in q:
        lookups["from_number"] = q["From"]
        filters.append(("From", q["From"]))
    for name in ("DateSent", "DateSent>", "DateSent<"):
        if name in q:
            first, last = _bound(name, q[name])
            if name != "DateSent<":
                lookups["sent_at__gte"] = max(first, lookups.get("sent_at__gte", first))
            if name != "DateSent>":
                lookups["sent_at__lte"] = min(last, lookups.get("sent_at__lte", last))
            filters.append((name, q[name]))
    before_id = None
    token = q.get("PageToken")
    if token:
        before_id = ascii_int(token[2:], max_digits=19) if token.startswith("PA") else None
        if before_id is None or before_id > _INT64_MAX:
            raise TwilioError(400, 20001, "Invalid PageToken: use the next_page_uri of a page as given")
    return lookups, filters, before_id


def _list(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    q = _params(request, "GET")
    _unknown(q, LIST_PARAMS)
    page_size = ascii_int(q.get("PageSize", str(DEFAULT_PAGE_SIZE)), max_digits=4)
    if page_size is None or not 1 <= page_size <= MAX_PAGE_SIZE:
        raise TwilioError(400, 20001, f"PageSize must be a whole number from 1 to {MAX_PAGE_SIZE}")
    page = ascii_int(q.get("Page", "0"), max_digits=10)
    if page is None or page > MAX_PAGE:
        raise TwilioError(400, 20001, f"Page must be a whole number from 0 to {MAX_PAGE}")
    lookups, filters, before_id = _filtered(tenant, q)
    # Newest first over the live table and history together (a message final for a while has moved).
    rows = message_page(
        qs=Message.objects.filter(tenant=tenant, deleted_at__isnull=True, **lookups),
        tenant=tenant,
        lookups=lookups,
        before=before_id,
        after=None,
        limit=page_size + 1,
    )
    more = len(rows) > page_size
    rows = rows[:page_size]
    path = f"{messages_path(tenant.facade_account_sid)}.json"

    def page_uri(number: int, page_token: str | None) -> str:
        params = [*filters, ("PageSize", str(page_size)), ("Page", str(number))]
        if page_token:
            params.append(("PageToken", page_token))
        return f"{path}?{urlencode(params)}"

    start = page * page_size
    return JsonResponse(
        {
            "messages": [message_resource(m, tenant.facade_account_sid) for m in rows],
            "end": start + max(len(rows) - 1, 0),
            "first_page_uri": page_uri(0, None),
            "next_page_uri": page_uri(page + 1, f"PA{rows[-1].pk}") if more else None,
            "page": page,
            "page_size": page_size,
            "previous_page_uri": None,
            "start": start,
            "uri": request.get_full_path(),
        }
    )
