"""A Twilio request turned into the message services' calls, and their refusals into Twilio's errors.

Parameters are Twilio's (``To``, ``From``, ``MessagingServiceSid``, ``Body``, ``StatusCallback``,
``ValidityPeriod``, ``SendAt``, ``ScheduleType``, ``ContentRetention``, ``AddressRetention``), plus the
documented extensions: ``SmsgwTimezone`` (or the ``X-Smsgw-Timezone`` header, or RFC 9557's
``[Zone/Name]`` suffix on ``SendAt``, which every SDK passes through unchanged) for a local wall time.
Outside strict mode ``SendAt`` reaches the gateway's horizon, needs no Messaging Service and no
``ScheduleType``; in strict mode (``Tenant.facade_strict``) the answers are exactly Twilio's limits and
codes (docs/coming-from-twilio.md)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from scheduling.facade.names import SENDER_POOL_FIELD
from scheduling.facade.resources import TwilioError
from scheduling.models import Message, Status
from smsgw.channels import DEFAULT_CHANNEL, AddressError
from smsgw.domain_errors import DomainError, InvalidInput, QuotaExceeded
from smsgw.models import Tenant
from smsgw.values.digits import ascii_int

# Twilio's scheduling window (twilio.com/docs/api/errors/35114: "SendAt time must be between 900 seconds
# and 35 days (3024000 seconds) in the future"; Twilio's newer error pages say 300 s: settable) and its
# soft limit of scheduled messages per account (35125).
STRICT_MAX_AHEAD = timedelta(days=35)
STRICT_SCHEDULED_LIMIT = 500_000
# ValidityPeriod: Twilio takes 1-36000 s (twilio-oai: "How long, in seconds, the Message can remain in
# our outgoing message queue"; 14 400 s default). The gateway keeps a message up to 7 days.
STRICT_MAX_VALIDITY = 36_000
MAX_VALIDITY = 7 * 86400
MESSAGING_SERVICE = re.compile(r"^MG[0-9a-fA-F]{32}$")
_ZONE_SUFFIX = re.compile(r"^(?P<time>[^\[\]]+)\[(?P<zone>[A-Za-z0-9_+\-/]+)\]$")
CREATE_PARAMS = frozenset(
    (
        "To",
        "From",
        "MessagingServiceSid",
        "Body",
        "StatusCallback",
        "ValidityPeriod",
        "SendAt",
        "ScheduleType",
        "SmsgwTimezone",
        "SmsgwDstPolicy",
        "ContentRetention",
        "AddressRetention",
        # Accepted and ignored as Twilio does when they do not apply to an SMS.
        "ApplicationSid",
        "MaxPrice",
        "ProvideFeedback",
        "Attempt",
        "ForceDelivery",
        "SmartEncoded",
        "ShortenUrls",
        "SendAsMms",
        "RiskCheck",
        "Tags",
        "TrafficType",
    )
)


# Twilio's per-message privacy controls, honoured (retention.requested; docs/erasure.md): the values its
# Messages resource takes (twilio-oai: message_enum_content_retention "retain" | "discard",
# message_enum_address_retention "retain" | "obfuscate") and its refusals of any other value
# (twilio.com/docs/api/errors/30029 "Invalid ContentRetention", /30030 "Invalid AddressRetention").
RETENTION_PARAMS = {
    "ContentRetention": ("content_retention", ("retain", "discard"), 30029),
    "AddressRetention": ("address_retention", ("retain", "obfuscate"), 30030),
}


def _strict_min_lead() -> int:
    return settings.FACADE_STRICT_MIN_LEAD_SECONDS


def _param(params, name: str) -> str | None:
    value = params.get(name)
    return None if value is None else str(value)


def _status_callback(url: str) -> str:
    """The URL's form; where it points (public addresses only) is checked again at each delivery
    (receipts.webhooks.webhook_target), where DNS is resolved."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        host = None
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not host or len(url) > 1024:
        raise TwilioError(400, 21609, f"Invalid StatusCallback URL: {url[:100]}")
    if parts.username or parts.password:
        raise TwilioError(400, 21609, "The StatusCallback URL must not contain credentials")
    if parts.scheme != "https" and not settings.WEBHOOK_ALLOW_HTTP:
        raise TwilioError(400, 21609, "The StatusCallback URL must use https")
    return url


def _validity(raw: str, strict: bool) -> int:
    top = STRICT_MAX_VALIDITY if strict else MAX_VALIDITY
    seconds = ascii_int(raw, max_digits=9)
    if seconds is None or not 1 <= seconds <= top:
        raise TwilioError(400, 21623, f"ValidityPeriod must be a whole number of seconds from 1 to {top}")
    return seconds


def _send_time(params, headers, tenant: Tenant) -> tuple[str | None, str | None]:
    """(send_at, timezone) as the services take them."""
    send_at = _param(params, "SendAt")
    zone = _param(params, "SmsgwTimezone") or headers.get("X-Smsgw-Timezone")
    if send_at:
        match = _ZONE_SUFFIX.match(send_at.strip())
        if match:
            send_at, zone = match["time"], zone or match["zone"]
    if tenant.facade_strict and (zone or (send_at and not _is_utc_instant(send_at))):
        raise TwilioError(
            400, 35115, "SendAt must be a UTC ISO-8601 timestamp (YYYY-MM-DDTHH:MM:SSZ) in strict mode"
        )
    return send_at or None, zone or None


def _is_utc_instant(value: str) -> bool:
    return value.strip().upper().endswith("Z") or value.strip().endswith("+00:00")


def _strict_schedule(tenant: Tenant, data: dict[str, Any], schedule_type: str | None) -> None:
    """Twilio's own rules for a scheduled send, in strict mode."""
    if not data.get("send_at"):
        return
    if schedule_type != "fixed":
        raise TwilioError(400, 35111, "ScheduleType must be 'fixed' when SendAt is given")
    if not data.get(SENDER_POOL_FIELD):
        raise TwilioError(400, 35118, "MessagingServiceSid is required to schedule a message")
    try:
        due = datetime.fromisoformat(data["send_at"].replace("Z", "+00:00"))
    except ValueError:
        raise TwilioError(400, 35115, "SendAt is not a valid ISO-8601 timestamp") from None
    ahead = (due - timezone.now()).total_seconds()
    lead = _strict_min_lead()
    if ahead < lead or ahead > STRICT_MAX_AHEAD.total_seconds():
        raise TwilioError(
            400,
            35114,
            f"SendAt time must be between {lead} seconds and 35 days "
            f"({int(STRICT_MAX_AHEAD.total_seconds())} seconds) in the future, inclusive",
        )
    scheduled = Message.objects.filter(Q(tenant=tenant) & Q(status=Status.SCHEDULED)).exclude(
        requested_send_at=""
    )
    if scheduled[STRICT_SCHEDULED_LIMIT - 1 : STRICT_SCHEDULED_LIMIT].exists():
        raise TwilioError(400, 35125, "Maximum limit reached in the account for scheduling messages")


def _sender(params, data: dict[str, Any]) -> None:
    from_ = (_param(params, "From") or "").strip()
    service = (_param(params, "MessagingServiceSid") or "").strip()
    if MESSAGING_SERVICE.match(from_) and not service:
        from_, service = "", from_  # Twilio takes a Messaging Service SID in From too
    if from_:
        data["from"] = from_
    if service:
        data[SENDER_POOL_FIELD] = service


def _schedule(tenant: Tenant, params, headers, data: dict[str, Any]) -> str | None:
    """SendAt, its zone and DST policy into ``data``; returns the ScheduleType given."""
    schedule_type = _param(params, "ScheduleType")
    if schedule_type is not None and schedule_type != "fixed":
        raise TwilioError(400, 35126, "The ScheduleType value provided is not supported: only 'fixed'")
    send_at, zone = _send_time(params, headers, tenant)
    if schedule_type == "fixed" and not send_at:
        raise TwilioError(400, 35111, "SendAt timestamp is missing: ScheduleType 'fixed' needs SendAt")
    if send_at:
        data["send_at"] = send_at
    if zone:
        data["timezone"] = zone
    policy = _param(params, "SmsgwDstPolicy")
    if policy:
        data["dst_policy"] = policy
    return schedule_type


def create_data(tenant: Tenant, params, headers) -> dict[str, Any]:
    """``message_create``'s ``data`` from a Twilio create request, or a TwilioError."""
    to = (_param(params, "To") or "").strip()
    if not to:
        raise TwilioError(400, 21604, "A 'To' phone number is required.")
    if params.get("MediaUrl") is not None or params.get("ContentSid") is not None:
        raise TwilioError(400, 21619, "Only SMS text is supported: MediaUrl and ContentSid are not")
    body = _param(params, "Body")
    if not body:
        raise TwilioError(400, 21602, "Message body is required.")
    data: dict[str, Any] = {"to": to, "body": body}
    _sender(params, data)
    schedule_type = _schedule(tenant, params, headers, data)
    validity = _param(params, "ValidityPeriod")
    if validity:
        data["validity_seconds"] = _validity(validity, tenant.facade_strict)
    callback = _param(params, "StatusCallback")
    if callback:
        data["status_callback"] = _status_callback(callback)
    _retention(params, data)
    if tenant.facade_strict:
        _strict_schedule(tenant, data, schedule_type)
    return data


def _retention(params, data: dict[str, Any]) -> None:
    for name, (field, allowed, code) in RETENTION_PARAMS.items():
        value = _param(params, name)
        if value is None:
            continue
        if value not in allowed:
            raise TwilioError(
                400, code, f"{name} must be {' or '.join(repr(a) for a in allowed)}, not {value[:32]!r}"
            )
        data[field] = value


def _to_problem(to: str) -> TwilioError:
    return TwilioError(400, 21211, f"The 'To' number {to[:64]} is not a valid phone number.")


# (field, reason) -> Twilio's code and message, for the refusals that are one fixed answer.
_FIXED = {
    ("to", "suppressed"): (21610, "Attempt to send to unsubscribed recipient"),
    ("body", "empty"): (21602, "Message body is required."),
    ("from", "no_sender"): (21603, "A 'From' phone number or a MessagingServiceSid is required."),
}
_SENDER_FIELDS = {"from": "From", SENDER_POOL_FIELD: "MessagingServiceSid"}
_TIME_FIELDS = {"timezone": "SmsgwTimezone", "dst_policy": "SmsgwDstPolicy"}


def twilio_error(exc: DomainError, data: dict[str, Any] | None = None) -> TwilioError:
    """Twilio's answer for a service's refusal."""
    if isinstance(exc, QuotaExceeded):
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else {}
        return TwilioError(429, 20429, f"Too Many Requests: {exc.message}", headers)
    if not isinstance(exc, InvalidInput):
        return TwilioError(400, 20001, exc.message)
    field, reason = exc.field, exc.reason
    fixed = _FIXED.get((field, reason))
    if fixed is not None:
        return TwilioError(400, *fixed)
    if field == "to" and reason == "destination":
        return TwilioError(
            400, 21408, f"Permission to send an SMS has not been enabled for the region: {exc}"
        )
    if field == "to":
        return _to_problem(str((data or {}).get("to", "")))
    if field == "body":
        return TwilioError(400, 21617, f"The concatenated message body exceeds the limit: {exc}")
    if field in _SENDER_FIELDS:
        return TwilioError(
            400, 21606, f"The '{_SENDER_FIELDS[field]}' is not a valid sender for this account: {exc}"
        )
    if field == "send_at":
        return TwilioError(400, 35114 if reason == "window" else 35115, f"SendAt: {exc}")
    if field in _TIME_FIELDS:
        return TwilioError(400, 35115, f"{_TIME_FIELDS[field]}: {exc}")
    return TwilioError(400, 20001, f"{field}: {exc}")


def normalized_to(raw: str) -> str:
    try:
        return DEFAULT_CHANNEL.address(raw)
    except AddressError:
        raise _to_problem(raw) from None
