"""The Twilio-compatible Messages API's views (docs/coming-from-twilio.md). Thin: authenticate as Twilio's
SDKs do (HTTP Basic), hand the request to ``requests`` and the message services, answer in Twilio's
shapes (``resources``). Plain Django views: Twilio's form bodies, errors and paging, not DRF's."""

from __future__ import annotations

import base64
import binascii
import math
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import AuthenticationFailed

from scheduling.facade import requests as facade
from scheduling.facade.resources import TwilioError, message_resource, messages_path, public_id_of
from scheduling.messages import service
from scheduling.models import Message, Status
from smsgw.domain_errors import ConflictError, DomainError, NotFoundError
from smsgw.http.boundary import first_bad_field
from smsgw.limits import ratelimit
from smsgw.models import ApiKey, Tenant
from smsgw.observability import events
from smsgw.tenancy.auth import basic_verify

MAX_PAGE_SIZE = 1000  # Twilio's PageSize ceiling
DEFAULT_PAGE_SIZE = 50
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


def _params(request: HttpRequest, which: str):
    """The form body (POST) or the query string (GET), refused in Twilio's form when Django's own limits
    on a form are passed or a value holds a NUL or an unpaired surrogate (no database column takes it)."""
    try:
        params = request.POST if which == "POST" else request.GET
    except RequestDataTooBig:
        raise TwilioError(413, 20001, "Request body too large") from None
    except (TooManyFieldsSent, TooManyFilesSent):
        raise TwilioError(400, 20001, "Too many parameters") from None
    bad = first_bad_field(params)
    if bad is not None:
        raise TwilioError(400, 20001, f"Parameter {bad!r} holds a NUL character or an unpaired surrogate")
    return params


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
        tenant, key = _authenticate(request, account_sid)
        if request.method == "POST":
            return _create(request, tenant, key)
        if request.method == "GET":
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


def _message(tenant: Tenant, sid: str, path: str) -> Message:
    public_id = public_id_of(sid)
    message = (
        Message.objects.filter(tenant=tenant, public_id=public_id, deleted_at__isnull=True).first()
        if public_id
        else None
    )
    if message is None:
        raise TwilioError(404, 20404, f"The requested resource {path} was not found")
    return message


@csrf_exempt
def message(request: HttpRequest, account_sid: str, sid: str) -> HttpResponse:
    """``GET`` fetches; ``POST`` cancels (``Status=canceled``) or redacts (``Body=``); ``DELETE``."""
    try:
        tenant, key = _authenticate(request, account_sid)
        current = _message(tenant, sid, request.path)
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
            if tenant.facade_strict and current.status != Status.SCHEDULED:
                raise ConflictError("Too late to cancel", current_status=current.status)
            current = service.message_cancel(tenant=tenant, public_id=current.public_id, actor=_actor(key))
        if body == "":
            current = service.message_redact(tenant=tenant, public_id=current.public_id, actor=_actor(key))
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
        service.message_delete(tenant=tenant, public_id=current.public_id, actor=_actor(key))
    except ConflictError as exc:
        raise TwilioError(
            400, 20009, f"Cannot delete message because delivery has not been completed: {exc}"
        ) from None


def _bound(name: str, raw: str) -> tuple[datetime, datetime]:
    """(first, last instant) a DateSent value covers: a whole UTC day for ``YYYY-MM-DD``, else the second."""
    value = raw.strip()
    try:
        if len(value) == 10:
            day = datetime.fromisoformat(value).replace(tzinfo=UTC)
            return day, day + timedelta(days=1) - timedelta(microseconds=1)
        if len(value) > 19 and value[-6] == " ":  # an unencoded "+" of "+00:00"
            value = value[:-6] + "+" + value[-5:]
        instant = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise TwilioError(400, 20001, f"Invalid {name}: {raw!r}") from None
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=UTC)
    return instant, instant + timedelta(seconds=1) - timedelta(microseconds=1)


def _filtered(tenant: Tenant, q) -> tuple[QuerySet[Message], list[tuple[str, str]]]:
    """The tenant's messages the list's filters and PageToken leave, and the filters as given (for the
    page URIs)."""
    qs = Message.objects.filter(tenant=tenant, deleted_at__isnull=True)
    filters: list[tuple[str, str]] = []
    if "To" in q:
        qs = qs.filter(to=facade.normalized_to(q["To"]))
        filters.append(("To", q["To"]))
    if "From" in q:
        qs = qs.filter(from_number=q["From"])
        filters.append(("From", q["From"]))
    for name in ("DateSent", "DateSent>", "DateSent<"):
        if name in q:
            first, last = _bound(name, q[name])
            if name != "DateSent<":
                qs = qs.filter(sent_at__gte=first)
            if name != "DateSent>":
                qs = qs.filter(sent_at__lte=last)
            filters.append((name, q[name]))
    token = q.get("PageToken")
    if token:
        if not token.startswith("PA") or not token[2:].isdigit():
            raise TwilioError(400, 20001, "Invalid PageToken")
        qs = qs.filter(id__lt=int(token[2:]))
    return qs, filters


def _list(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    q = _params(request, "GET")
    _unknown(q, LIST_PARAMS)
    try:
        page_size = int(q.get("PageSize", DEFAULT_PAGE_SIZE))
        page = int(q.get("Page", 0))
    except ValueError:
        raise TwilioError(400, 20001, "Invalid Page or PageSize") from None
    if not 1 <= page_size <= MAX_PAGE_SIZE or page < 0:
        raise TwilioError(400, 20001, f"PageSize must be between 1 and {MAX_PAGE_SIZE}")
    qs, filters = _filtered(tenant, q)
    rows = list(qs.order_by("-id")[: page_size + 1])
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
