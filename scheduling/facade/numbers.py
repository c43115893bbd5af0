"""The Twilio-compatible IncomingPhoneNumbers resource (docs/coming-from-twilio.md), as far as a Twilio
program needs it to receive messages: list the tenant's phone numbers, fetch one, and set its ``SmsUrl``
and ``SmsMethod`` (``client.incoming_phone_numbers(sid).update(sms_url=...)``). Shapes as Twilio documents
them (twilio.com/docs/phone-numbers/api/incomingphonenumber-resource; twilio-oai's
``api.v2010.account.incoming_phone_number``). The numbers themselves are the tenant's phone-number senders
(smsgw.models.TenantSender), assigned by an operator: no provisioning (POST to the list) and no release
(DELETE) here. A message that comes in to a number with an SmsUrl is forwarded there in Twilio's form
(inbound.facade_forward)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from scheduling.facade.api import _authenticate, _body_checked, _error, _params, _require, _unknown
from scheduling.facade.resources import API_VERSION, TwilioError, number_sid, rfc2822, sender_pk_of
from smsgw import stages
from smsgw.models import SenderKind, Tenant, TenantSender
from smsgw.values.digits import ascii_int

# Setting an SmsUrl points the gateway's outbox at a URL: the scope that points the tenant's webhook.
SCOPE = "webhooks:manage"
LIST_PARAMS = frozenset(("PhoneNumber", "FriendlyName", "Beta", "Origin", "PageSize", "Page", "PageToken"))
UPDATE_PARAMS = frozenset(("SmsUrl", "SmsMethod"))
MAX_PAGE_SIZE = 1000
DEFAULT_PAGE_SIZE = 50
MAX_URL_LENGTH = 1024


def numbers_path(account_sid: str) -> str:
    return f"/{API_VERSION}/Accounts/{account_sid}/IncomingPhoneNumbers"


def number_resource(sender: TenantSender, account_sid: str) -> dict[str, Any]:
    """The IncomingPhoneNumber resource for one of the tenant's numbers: SMS only, no voice."""
    sid = number_sid(sender.pk)
    base = f"{numbers_path(account_sid)}/{sid}"
    return {
        "account_sid": account_sid,
        "address_requirements": "none",
        "address_sid": None,
        "api_version": API_VERSION,
        "beta": False,
        "bundle_sid": None,
        "capabilities": {"fax": False, "mms": False, "sms": True, "voice": False},
        "date_created": rfc2822(sender.created_at),
        "date_updated": rfc2822(sender.updated_at),
        "emergency_address_sid": None,
        "emergency_address_status": "unregistered",
        "emergency_status": "Inactive",
        "friendly_name": sender.value,
        "identity_sid": None,
        "origin": "hosted",
        "phone_number": sender.value,
        "sid": sid,
        "sms_application_sid": "",
        "sms_fallback_method": "POST",
        "sms_fallback_url": "",
        "sms_method": sender.sms_method,
        "sms_url": sender.sms_url,
        "status": "in-use",
        "status_callback": "",
        "status_callback_method": "POST",
        "subresource_uris": {"assigned_add_ons": f"{base}/AssignedAddOns.json"},
        "trunk_sid": None,
        "uri": f"{base}.json",
        "voice_application_sid": None,
        "voice_caller_id_lookup": False,
        "voice_fallback_method": "POST",
        "voice_fallback_url": None,
        "voice_method": "POST",
        "voice_receive_mode": "voice",
        "voice_url": None,
    }


def _numbers(tenant: Tenant):
    return TenantSender.objects.filter(tenant=tenant, kind=SenderKind.NUMBER).order_by("pk")


@csrf_exempt
def incoming_numbers(request: HttpRequest, account_sid: str) -> HttpResponse:
    """``GET`` lists the tenant's phone numbers in Twilio's pages."""
    try:
        _body_checked(request)
        tenant, key = _authenticate(request, account_sid)
        if request.method != "GET":
            raise TwilioError(
                405, 20004, "Method not allowed: numbers are assigned by the gateway's operator"
            )
        _require(key, [SCOPE])
        return _list(request, tenant)
    except TwilioError as err:
        return _error(err)


def _list(request: HttpRequest, tenant: Tenant) -> HttpResponse:
    q = _params(request, "GET")
    _unknown(q, LIST_PARAMS)
    page_size = ascii_int(q.get("PageSize", str(DEFAULT_PAGE_SIZE)), max_digits=4)
    if page_size is None or not 1 <= page_size <= MAX_PAGE_SIZE:
        raise TwilioError(400, 20001, f"PageSize must be a whole number from 1 to {MAX_PAGE_SIZE}")
    page = ascii_int(q.get("Page", "0"), max_digits=6)
    if page is None:
        raise TwilioError(400, 20001, "Page must be a whole number")
    qs = _numbers(tenant)
    filters = []
    for name in ("PhoneNumber", "FriendlyName"):  # Twilio: "may be a partial" number
        if q.get(name):
            qs = qs.filter(value__contains=q[name].strip())
            filters.append((name, q[name]))
    token = q.get("PageToken")
    if token:
        after = ascii_int(token[2:], max_digits=18) if token.startswith("PA") else None
        if after is None:
            raise TwilioError(400, 20001, "Invalid PageToken: use the next_page_uri of a page as given")
        qs = qs.filter(pk__gt=after)
    rows = list(qs[: page_size + 1])
    more = len(rows) > page_size
    rows = rows[:page_size]
    path = f"{numbers_path(tenant.facade_account_sid)}.json"

    def page_uri(number: int, page_token: str | None) -> str:
        params = [*filters, ("PageSize", str(page_size)), ("Page", str(number))]
        if page_token:
            params.append(("PageToken", page_token))
        return f"{path}?{urlencode(params)}"

    start = page * page_size
    return JsonResponse(
        {
            "incoming_phone_numbers": [number_resource(s, tenant.facade_account_sid) for s in rows],
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


@csrf_exempt
def incoming_number(request: HttpRequest, account_sid: str, sid: str) -> HttpResponse:
    """``GET`` fetches one number; ``POST`` sets its ``SmsUrl`` (empty: stop forwarding) and ``SmsMethod``."""
    try:
        _body_checked(request)
        tenant, key = _authenticate(request, account_sid)
        if request.method not in ("GET", "POST"):
            raise TwilioError(
                405, 20004, "Method not allowed: numbers are released by the gateway's operator"
            )
        _require(key, [SCOPE])
        pk = sender_pk_of(sid)
        sender = _numbers(tenant).filter(pk=pk).first() if pk is not None else None
        if sender is None:
            raise TwilioError(404, 20404, f"The requested resource {request.path} was not found")
        if request.method == "POST":
            _update(_params(request, "POST"), sender)
        return JsonResponse(number_resource(sender, account_sid))
    except TwilioError as err:
        return _error(err)


def _update(params, sender: TenantSender) -> None:
    unknown = sorted(set(params) - UPDATE_PARAMS)
    if unknown:
        raise TwilioError(
            400,
            20001,
            f"Parameter {unknown[0]!r} is not supported: smsgw's numbers take SmsUrl and SmsMethod",
        )
    fields = []
    if "SmsUrl" in params:
        sender.sms_url = sms_url_checked(params["SmsUrl"].strip())
        fields.append("sms_url")
    if "SmsMethod" in params:
        method = params["SmsMethod"].strip().upper()
        if method not in ("GET", "POST"):
            raise TwilioError(400, 21502, f"SmsMethod must be GET or POST, not {params['SmsMethod'][:16]!r}")
        sender.sms_method = method
        fields.append("sms_method")
    if fields:
        sender.save(update_fields=[*fields, "updated_at"])


def sms_url_checked(url: str) -> str:
    """An SmsUrl as the outbox will call it: absolute http(s) (https outside development), no
    credentials, and a host that resolves to public addresses only (the outbox's SSRF check, run again at
    each delivery). Empty clears it."""
    if not url:
        return ""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        parts, host = None, None
    if parts is None or parts.scheme not in ("http", "https") or not host or len(url) > MAX_URL_LENGTH:
        raise TwilioError(400, 21502, f"Invalid SmsUrl: {url[:100]}")
    if parts.scheme != "https" and not settings.WEBHOOK_ALLOW_HTTP:
        raise TwilioError(400, 21502, "The SmsUrl must use https")
    try:
        stages.url_check()(url)
    except ValueError as exc:
        raise TwilioError(400, 21502, f"SmsUrl {exc}") from None
    return url
