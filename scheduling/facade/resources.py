"""Twilio's shapes for smsgw's messages, as twilio-oai describes them (spec/json/twilio_api_v2010.json,
``api.v2010.account.message``): the ``SM`` SID of a message, RFC 2822 dates, Twilio's status names, the
error codes of failed messages and the ``{code, message, more_info, status}`` error body."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from scheduling.lifecycle.reasons import ReasonCode
from scheduling.models import Message, Status
from smsgw.values.actors import reason_for_tenant
from smsgw.values.digits import is_ascii_digits

API_VERSION = "2010-04-01"
MORE_INFO = "https://www.twilio.com/docs/errors/"
_PUBLIC_PREFIX = "msg_"


# --- SIDs ---------------------------------------------------------------------------------------------
def _check(hex24: str) -> str:
    return hashlib.blake2s(hex24.encode(), digest_size=4).hexdigest()


def message_sid(public_id: str) -> str:
    """``SM`` + 32 hex (Twilio's ``^SM[0-9a-fA-F]{32}$``): the message id's 24 hex digits and 8 of a
    check over them. Stable (computed, never stored), and ``public_id_of`` reverses it."""
    hex24 = public_id.removeprefix(_PUBLIC_PREFIX)
    return f"SM{hex24}{_check(hex24)}"


def public_id_of(sid: str) -> str | None:
    """The message id an ``SM`` SID stands for, or None when it is not one of ours."""
    if len(sid) != 34 or not sid.startswith("SM"):
        return None
    hex24, check = sid[2:26].lower(), sid[26:].lower()
    if _check(hex24) != check:
        return None
    return _PUBLIC_PREFIX + hex24


def inbound_sid(public_id: str) -> str:
    """The ``SM`` SID of an inbound message (``in_`` + 24 hex, inbound.models): its 24 hex digits and 8
    of a check salted apart from an outbound message's, so ``public_id_of`` never takes one for the
    other. Stable: a retried forward names the same message."""
    hex24 = public_id.removeprefix("in_")
    return f"SM{hex24}{_check('in:' + hex24)}"


def number_sid(sender_pk: int) -> str:
    """The ``PN`` SID of a tenant's phone number (a TenantSender row): Twilio's ``^PN[0-9a-fA-F]{32}$``,
    the row's id in 24 hex digits and 8 of a check, stable and reversed by ``sender_pk_of``."""
    hex24 = f"{sender_pk:024x}"
    return f"PN{hex24}{_check('pn:' + hex24)}"


def sender_pk_of(sid: str) -> int | None:
    if len(sid) != 34 or not sid.startswith("PN"):
        return None
    hex24, check = sid[2:26].lower(), sid[26:].lower()
    if not all(c in "0123456789abcdef" for c in hex24 + check) or _check("pn:" + hex24) != check:
        return None
    return int(hex24, 16)


# --- dates and statuses -------------------------------------------------------------------------------
def rfc2822(value: datetime | None) -> str | None:
    """Twilio's date form, e.g. ``Wed, 02 Dec 2026 18:05:00 +0000`` (whole seconds, UTC)."""
    if value is None:
        return None
    return format_datetime(value.astimezone(UTC).replace(microsecond=0))


def was_scheduled(m: Message) -> bool:
    """Twilio calls a message ``scheduled`` only when it was created with a send time (ours: a
    ``send_at``, or a quiet window that moved it)."""
    return bool(m.requested_send_at) or m.quiet_deferred_from is not None


def initial_status(m: Message) -> str:
    """The status Twilio answers a create with: ``scheduled`` with a send time, ``accepted`` for a
    Messaging Service send (its sender is not chosen yet), else ``queued``."""
    if was_scheduled(m):
        return "scheduled"
    return "accepted" if m.sender_pool and not m.from_number else "queued"


_STATUS = {
    Status.QUEUED: "queued",
    Status.SENDING: "sending",
    Status.SENT: "sent",
    Status.DELIVERED: "delivered",
    Status.UNDELIVERED: "undelivered",
    Status.FAILED: "failed",
    Status.CANCELLED: "canceled",
    Status.EXPIRED: "failed",  # Twilio: failed with 30036 when the validity period runs out
}


def twilio_status(m: Message) -> str:
    if m.status == Status.SCHEDULED:
        return initial_status(m)
    return _STATUS[Status(m.status)]


# Twilio's texts for the codes smsgw sets itself (twilio.com/docs/api/errors/<code>).
ERROR_TEXTS = {
    21610: "Attempt to send to unsubscribed recipient",
    30003: "Unreachable destination handset",
    30008: "Unknown error",
    30036: "Validity Period Expired",
}


def error_code(m: Message) -> int | None:
    """Twilio's code for a message that did not make it: the provider's own when it is Twilio's (digits),
    30036 for an expired validity, 21610 for an opt-out, else 30008 (unknown error)."""
    if m.status == Status.EXPIRED:
        return 30036
    if m.status not in (Status.FAILED, Status.UNDELIVERED):
        return None
    if is_ascii_digits(m.error_code):  # the provider's, from a callback: "²" passes isdigit(), not int()
        return int(m.error_code)
    if m.reason_code == ReasonCode.OPTED_OUT:
        return 21610
    return 30003 if m.status == Status.UNDELIVERED else 30008


def error_message(m: Message, code: int | None) -> str | None:
    if code is None:
        return None
    return ERROR_TEXTS.get(code) or reason_for_tenant(m.status_reason) or ERROR_TEXTS[30008]


def messages_path(account_sid: str) -> str:
    return f"/{API_VERSION}/Accounts/{account_sid}/Messages"


def message_resource(m: Message, account_sid: str) -> dict[str, Any]:
    """The Message resource as Twilio renders it, plus ``smsgw_id`` and ``smsgw_status`` (the message's
    id and richer status on ``/v1/``), which the SDKs keep out of their typed fields."""
    sid = message_sid(m.public_id)
    base = f"{messages_path(account_sid)}/{sid}"
    code = error_code(m)
    sent = m.sent_at or (m.delivered_at if m.status in (Status.DELIVERED, Status.UNDELIVERED) else None)
    assigned = bool(m.from_number) and not (m.sender_pool and m.status == Status.SCHEDULED)
    return {
        "account_sid": account_sid,
        "api_version": API_VERSION,
        "body": m.body,
        "date_created": rfc2822(m.created_at),
        "date_sent": rfc2822(sent),
        "date_updated": rfc2822(m.updated_at),
        "direction": "outbound-api",
        "error_code": code,
        "error_message": error_message(m, code),
        "from": m.from_number if assigned else None,
        "messaging_service_sid": m.sender_pool or None,
        "num_media": "0",
        "num_segments": str(m.segments),
        "price": None,
        "price_unit": "USD",
        "sid": sid,
        "status": twilio_status(m),
        "subresource_uris": {"media": f"{base}/Media.json", "feedback": f"{base}/Feedback.json"},
        "to": m.to,
        "uri": f"{base}.json",
        "smsgw_id": m.public_id,
        "smsgw_status": m.status,
    }


# --- errors -------------------------------------------------------------------------------------------
class TwilioError(Exception):
    """A refusal in Twilio's form: HTTP ``status`` and Twilio's ``code``; ``headers`` for Retry-After."""

    def __init__(self, status: int, code: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "more_info": f"{MORE_INFO}{self.code}",
            "status": self.status,
        }


# --- status callbacks ---------------------------------------------------------------------------------
_CALLBACK_STATUS = {
    Status.SENT: "sent",
    Status.DELIVERED: "delivered",
    Status.UNDELIVERED: "undelivered",
    Status.FAILED: "failed",
    Status.EXPIRED: "failed",
    Status.CANCELLED: "canceled",
}


def callback_status(m: Message, from_status: str, to_status: str) -> str | None:
    """The status Twilio calls a message's StatusCallback about for this change, or None (Twilio docs,
    "Outbound Message Status in Status Callbacks"): none for the initial status; ``queued`` when a
    scheduled or Messaging Service send leaves ``scheduled``/``accepted``; ``sent``; then ``delivered``,
    ``undelivered`` or ``failed``; ``canceled`` for a cancel. No ``sending``, and none for the gateway's
    own moves (a retry back to queued, a reschedule)."""
    if to_status == Status.QUEUED:
        leaves = from_status == Status.SCHEDULED and initial_status(m) != "queued"
        return "queued" if leaves else None
    return _CALLBACK_STATUS.get(Status(to_status)) if to_status in _CALLBACK_STATUS else None


def callback_params(m: Message, account_sid: str, status: str) -> dict[str, str]:
    """The form Twilio POSTs to a StatusCallback for an outbound SMS (Twilio's Message resource docs,
    "Twilio's request to the StatusCallback URL"; as delivery/providers/twilio/sandbox/callbacks.py sends
    them)."""
    sid = message_sid(m.public_id)
    params = {
        "AccountSid": account_sid,
        "ApiVersion": API_VERSION,
        "MessageSid": sid,
        "MessageStatus": status,
        "SmsSid": sid,
        "SmsStatus": status,
        "To": m.to,
    }
    if m.from_number:
        params["From"] = m.from_number
    if m.sender_pool:
        params["MessagingServiceSid"] = m.sender_pool
    code = error_code(m)
    if status in ("failed", "undelivered") and code is not None:
        params["ErrorCode"] = str(code)
    return params


# --- status callbacks ---------------------------------------------------------------------------------
# The webhook outbox's event type of a StatusCallback (receipts.webhooks): stored in its rows, never renamed.
CALLBACK_EVENT = "twilio.status_callback"
# And of an incoming message forwarded to a number's SmsUrl (inbound.facade_forward), whose TwiML answer
# is kept and acted on.
INCOMING_EVENT = "twilio.incoming"


def incoming_params(
    *, public_id: str, account_sid: str, from_: str, to: str, body: str, segments: int, pool: str
) -> dict[str, str]:
    """The form Twilio sends an SmsUrl when a message comes in, with Twilio's names
    (twilio.com/docs/messaging/guides/webhook-request: MessageSid, SmsSid, SmsMessageSid, AccountSid,
    MessagingServiceSid when the number is in a Messaging Service, From, To, Body, NumMedia, NumSegments,
    SmsStatus ``received``, ApiVersion). No media: smsgw takes SMS text only."""
    sid = inbound_sid(public_id)
    params = {
        "MessageSid": sid,
        "SmsMessageSid": sid,
        "SmsSid": sid,
        "AccountSid": account_sid,
        "From": from_,
        "To": to,
        "Body": body,
        "NumMedia": "0",
        "NumSegments": str(segments),
        "SmsStatus": "received",
        "ApiVersion": API_VERSION,
    }
    if pool:
        params["MessagingServiceSid"] = pool
    return params


def callback_signature(key: str, url: str, params: dict[str, str]) -> str:
    """``X-Twilio-Signature``: base64(HMAC-SHA1(key, URL + each parameter's name and value, names
    sorted)), as Twilio signs its webhooks (twilio.com/docs/usage/webhooks/webhooks-security) and the
    official SDKs' ``RequestValidator`` checks them."""
    payload = url + "".join(name + params[name] for name in sorted(params))
    return base64.b64encode(hmac.new(key.encode(), payload.encode(), hashlib.sha1).digest()).decode()


def callback_headers(key: str, url: str, params: dict[str, str], token: str) -> dict[str, str]:
    """The headers of one StatusCallback POST: the form, the signature with the tenant's callback signing
    key, and Twilio's webhook idempotency token (``token``: the same on every retry of one callback)."""
    return {
        "Content-Type": "application/x-www-form-urlencoded",
        "User-Agent": "smsgw-status-callbacks/1",
        "X-Twilio-Signature": callback_signature(key, url, params),
        "I-Twilio-Idempotency-Token": token,
    }
