"""Vonage delivery receipts (DLRs) and inbound messages: parse, redact, verify.

Sources (developer.vonage.com, checked 2026-12):

* fields and statuses: https://developer.vonage.com/messaging/sms/guides/delivery-receipts (``msisdn``,
  ``to``, ``network-code``, ``messageId``, ``price``, ``status``, ``scts`` ``YYMMDDHHMM``, ``err-code``,
  ``api-key``, ``client-ref``, ``message-timestamp``; status ``delivered``, ``expired``, ``failed``,
  ``rejected``, ``accepted``, ``buffered``, ``unknown``); one receipt per part of a long message;
* methods: the account's receipt webhook is sent as ``POST-JSON``, ``POST`` (form) or ``GET`` (query);
  ``parse`` takes the fields as one dict whatever the transport;
* signatures: https://developer.vonage.com/getting-started/concepts/signing-messages (with a signature
  secret, ``timestamp``, ``nonce`` and ``sig`` are added; "MD5 hash" or an HMAC chosen in the dashboard).
  HMAC methods are verified by the SDK's ``Auth.check_signature``; md5hash (which the SDK's ``Auth``
  does not offer) here, by the same string. The SDK checks no ``timestamp``: the window is ours
  (``SIGNATURE_MAX_AGE_SECONDS``), and a signature already taken is refused by receipts.replay (the
  page's "defend against interception and later replay" needs both: the window bounds how long a
  signature must be remembered).
* inbound messages: https://developer.vonage.com/messaging/sms/guides/inbound-sms (``msisdn`` the
  sender, ``to`` our virtual number, ``messageId``, ``text``, ``type`` text/unicode/binary, ``keyword``,
  ``message-timestamp``; ``concat``, ``concat-ref``, ``concat-total``, ``concat-part`` on each part of a
  long message; ``timestamp``, ``nonce`` and ``sig`` when signed; sent by GET or POST; "you must send a
  200 OK or 204 No Content response. If you don't, then Vonage will ... keep resending it for the next
  24 hours").

This adapter speaks the SMS API (``POST /sms/json``), so these are its signed webhooks: the Messages
API's JWT-signed webhooks (``Authorization: Bearer``, developer.vonage.com/getting-started/concepts/
webhooks, "Signed webhooks") are not what an SMS API account sends.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from datetime import UTC, datetime

from delivery.providers.base import (
    HINT_ATTEMPT,
    HINT_MESSAGE,
    HINT_MESSAGE_RE,
    CallbackData,
    CallbackInvalid,
    InboundMessage,
    carrier_minute,
    redact_fields,
)
from smsgw.values.digits import ascii_int

# Raw DLR status -> ours (delivery.providers.base.RECEIPT_STATUSES).
STATUS_MAP = {
    # intermediate: a carrier took it / holds it for later delivery
    "accepted": "sent",
    "buffered": "sent",
    "delivered": "delivered",
    # "failed": not delivered, possibly after the carrier tried the handset; "expired": held by the
    # carrier's retry scheme until its validity passed. Neither proves nothing reached the handset, so
    # neither is sent again: undelivered.
    "failed": "undelivered",
    "expired": "undelivered",
    # "rejected": the downstream carrier refused it - nothing was handed on: failed (a transient err-code
    # may send it again).
    "rejected": "failed",
    # "unknown": no status from the carrier; nothing to decide on (kept raw for review).
    "unknown": "",
}

NUMBER_FIELDS = ("msisdn", "to")
DROPPED_FIELDS = ("text", "api-key", "sig", "nonce")
# client-ref: "<message ref>.<attempt>" (adapter.client_ref), our hint when a receipt reaches the
# account's webhook instead of the callback URL (no query).
_CLIENT_REF_RE = re.compile(r"([0-9a-f]{24})\.([0-9]{1,5})")


def client_ref(message_ref: str, attempt: int) -> str:
    return f"{message_ref}.{attempt}"


def redact(params: dict) -> dict[str, str]:
    return redact_fields(params, dropped=DROPPED_FIELDS, numbers=NUMBER_FIELDS)


def _hints(params: dict, query: dict) -> tuple[str, int | None]:
    hint = str(query.get(HINT_MESSAGE) or "").strip().lower()
    raw_attempt = str(query.get(HINT_ATTEMPT) or "").strip()
    if HINT_MESSAGE_RE.fullmatch(hint):
        attempt = ascii_int(raw_attempt, max_digits=5)
        return hint, attempt
    match = _CLIENT_REF_RE.fullmatch(str(params.get("client-ref") or "").strip().lower())
    if match:
        return match.group(1), int(match.group(2))
    return "", None


def parse(params: dict, query: dict) -> CallbackData:
    message_id = str(params.get("messageId") or params.get("message-id") or "").strip()
    raw_status = str(params.get("status") or "").strip()
    if not message_id or len(message_id) > 64:
        raise CallbackInvalid("messageId", "missing or too long")
    if not raw_status or len(raw_status) > 32:
        raise CallbackInvalid("status", "missing or too long")
    err_code = str(params.get("err-code") or "").strip()[:32]
    hint, attempt = _hints(params, query)
    return CallbackData(
        provider_message_id=message_id,
        raw_status=raw_status,
        normalized_status=STATUS_MAP.get(raw_status.lower(), ""),
        error_code="" if err_code == "0" else err_code,
        done_at=carrier_minute(str(params.get("scts") or "")),
        message_hint=hint,
        attempt_hint=attempt,
        payload=redact(params),
    )


def _md5hash(params: dict, secret: str) -> str:
    """Vonage's "MD5 hash" signature: MD5 of the sorted ``&key=value`` string (``&`` and ``=`` in values
    replaced by ``_``) followed by the secret, lower-case hex."""
    text = "".join(
        "&{}={}".format(key, str(params[key]).replace("&", "_").replace("=", "_")) for key in sorted(params)
    )
    return hashlib.md5((text + secret).encode("utf-8")).hexdigest()  # noqa: S324 - Vonage's scheme


def _signed_with(fields: dict[str, str], *, api_key: str, secret: str, method: str) -> bool:
    if method == "md5hash":
        rest = {k: v for k, v in fields.items() if k != "sig"}
        return hmac.compare_digest(fields["sig"].lower(), _md5hash(rest, secret))
    from vonage import Auth  # the SDK: HMAC-MD5/SHA1/SHA256/SHA512

    auth = Auth(api_key=api_key or "x", signature_secret=secret, signature_method=method)
    return bool(auth.check_signature(dict(fields)))


def validate(
    params: dict,
    *,
    api_key: str,
    secret: str,
    method: str,
    max_age: float,
    now: float | None = None,
    previous_secret: str = "",
) -> bool:
    """Is the callback (a receipt or an inbound message) signed with our signature secret, and recent?
    Without a configured secret every callback is taken (Vonage signs only when the account has one;
    production refuses to start without it when a route reaches Vonage). A signed callback must carry
    ``timestamp`` and ``sig``, and name our api key when it names one. Returns False for a bad
    signature; raises CallbackInvalid("timestamp") for a well-signed one whose ``timestamp`` is further
    than ``max_age`` seconds from ``now`` (a replay, or a clock far off). Checked after the signature,
    so an unsigned caller learns nothing about the window."""
    if not secret:
        return True
    fields = {str(k): "" if v is None else str(v) for k, v in params.items()}
    if not fields.get("sig") or not fields.get("timestamp"):
        return False
    if fields.get("api-key") and api_key and fields["api-key"] != api_key:
        return False
    # ``previous_secret``: the one a rotation replaces (VONAGE_SIGNATURE_SECRET_PREVIOUS), for callbacks
    # Vonage signed before the dashboard's swap.
    if not any(
        _signed_with(fields, api_key=api_key, secret=s, method=method) for s in (secret, previous_secret) if s
    ):
        return False
    raw = fields["timestamp"].strip()
    at = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 12 else None
    current = time.time() if now is None else now
    if at is None or abs(current - at) > max_age:
        raise CallbackInvalid("timestamp", f"outside the {max_age:g}-second window of signed callbacks")
    return True


def replay_key(params: dict) -> str:
    """What a verified signed callback is remembered by (receipts.replay): its ``sig``, which covers
    the ``nonce`` and ``timestamp``, so no two genuine callbacks share one. "" when unsigned."""
    return str(params.get("sig") or "").strip().lower()


def _number(value: object) -> str:
    # Vonage writes numbers in international format without the "+" (447700900000).
    text = str(value or "").strip()
    return "+" + text if text.isascii() and text.isdigit() else text


# Kept beside a stored inbound message (inbound.models): the provider's fields other than the text and
# the numbers.
INBOUND_KEPT_FIELDS = ("type", "keyword", "message-timestamp", "api-key")
_MESSAGE_ID_RE = re.compile(r"[0-9A-Za-z-]{1,64}")


def parse_inbound(params: dict) -> InboundMessage:
    """An inbound SMS, or one part of a long one (``concat``: each part has its own ``messageId``, and
    ``concat-ref``, ``concat-total`` and ``concat-part``, 1-based; the parts may come in any order and
    inbound.parts joins them). The ``messageId`` names it: Vonage posts the same one again when it
    retries, so it is what a duplicate is told apart by. A binary message's ``text`` is not text: its
    body is empty. Raises CallbackInvalid naming a missing or malformed field."""
    for name in ("msisdn", "to"):
        if not str(params.get(name) or "").strip():
            raise CallbackInvalid(name, "missing")
    message_id = str(params.get("messageId") or "").strip()
    if not _MESSAGE_ID_RE.fullmatch(message_id):
        raise CallbackInvalid("messageId", "missing or not a Vonage message id")
    binary = str(params.get("type") or "").strip().lower() == "binary"
    ref, total, part = "", 0, 0
    if str(params.get("concat") or "").strip().lower() == "true":
        ref = str(params.get("concat-ref") or "").strip()[:16]
        total = ascii_int(str(params.get("concat-total") or "").strip(), max_digits=3) or 0
        part = ascii_int(str(params.get("concat-part") or "").strip(), max_digits=3) or 0
        if not ref:
            raise CallbackInvalid("concat-ref", "missing on a part of a long message")
        if not 1 <= part <= total:
            raise CallbackInvalid("concat-part", "must be between 1 and concat-total")
    return InboundMessage(
        body="" if binary else str(params.get("text") or ""),
        from_number=_number(params.get("msisdn")),
        to_number=_number(params.get("to")),
        from_field="msisdn",
        to_field="to",
        message_id=message_id,
        id_field="messageId",
        sent_at=_message_timestamp(params.get("message-timestamp")),
        concat_ref=ref,
        concat_total=total,
        concat_part=part,
        payload={k: str(params[k])[:64] for k in INBOUND_KEPT_FIELDS if params.get(k)},
    )


def _message_timestamp(value: object) -> datetime | None:
    # "2020-01-01 12:00:00" (UTC; developer.vonage.com/messaging/sms/guides/inbound-sms).
    try:
        return datetime.strptime(str(value or "").strip(), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return None
