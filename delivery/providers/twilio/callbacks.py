"""Twilio status callbacks (parse, redact, verify) and what Twilio does to a body, for matching.

Sources (Twilio docs, checked 2026-11):
* statuses: https://www.twilio.com/docs/messaging/api/message-resource ("Message Status values"), and the
  13 values of ``message_enum_status`` in twilio-oai spec/json/twilio_api_v2010.json;
* callback order: https://www.twilio.com/docs/messaging/guides/outbound-message-status-in-status-callbacks
  (no callback for the initial status; service sends go accepted -> queued callback; then ``sent`` or
  ``failed``, then ``delivered`` or ``undelivered``);
* ``RawDlrDoneDate``: "a passthrough of the Done Date included in the DLR ... in YYMMDDhhmm format";
* signatures: https://www.twilio.com/docs/usage/webhooks/webhooks-security (HMAC-SHA1 with the Auth Token)
  and https://www.twilio.com/docs/usage/webhooks/webhook-shared-keys (a SharedKey, announced by
  ``X-Twilio-Webhooks-Signature-Settings: key=<id>,algorithm=HMAC_SHA256``), both verified by the SDK's
  ``RequestValidator``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from twilio.request_validator import SIGNATURE_SETTINGS_HEADER, RequestValidator, get_signature_algorithm

from delivery.providers.base import (
    HINT_ATTEMPT,
    HINT_MESSAGE,
    HINT_MESSAGE_RE,
    CallbackData,
    CallbackInvalid,
    CallbackKeyUnknown,
    InboundMessage,
    carrier_minute,
    redact_fields,
)
from smsgw.values.digits import ascii_int

# Raw Twilio status -> ours (delivery.providers.base.RECEIPT_STATUSES).
STATUS_MAP = {
    "accepted": "queued",  # [Messaging Service only] picking a sender
    "scheduled": "queued",  # [Messaging Service only] scheduled at Twilio (we never schedule there)
    "queued": "queued",
    "sending": "sending",
    "sent": "sent",
    "delivered": "delivered",
    "read": "delivered",  # RCS / WhatsApp: opened, which implies delivered
    # "[Deprecated]"; some parts of a multi-part message reached the handset: the message as a whole
    # did not, so it is reported undelivered rather than delivered.
    "partially_delivered": "undelivered",
    "undelivered": "undelivered",
    "failed": "failed",
    "canceled": "canceled",  # [Messaging Service only] a message scheduled at Twilio was cancelled
    "receiving": "inbound",  # inbound statuses: never expected on an outbound message's callback
    "received": "inbound",
}

NUMBER_FIELDS = ("To", "From", "Called", "Caller")
# Descriptions only: nothing we decide reads them (ErrorCode, not its text, is what the error table takes).
FREE_TEXT_FIELDS = frozenset({"ErrorMessage"})
DROPPED_FIELDS = ("Body",)
TRIAL_PREFIX = "Sent from your Twilio trial account - "

# Twilio's Smart Encoding replaces Unicode look-alikes with GSM-7 characters (documented at
# https://www.twilio.com/docs/messaging/services/smart-encoding-char-list); the common ones, so a body
# Twilio rewrote still matches the one we sent.
_SMART = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201b": "'",
        "\u2032": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u2033": '"',
        "\u2013": "-",
        "\u2014": "-",
        "\u2012": "-",
        "\u2010": "-",
        "\u2011": "-",
        "\u2212": "-",
        "\u00a0": " ",
        "\u2002": " ",
        "\u2003": " ",
        "\u2009": " ",
        "\u200b": "",
        "\u2026": "...",
        "\u00ab": '"',
        "\u00bb": '"',
    }
)


def redact(params: Mapping[str, str]) -> dict[str, str]:
    return redact_fields(params, dropped=DROPPED_FIELDS, numbers=NUMBER_FIELDS)


def parse(params: dict[str, str], query: dict[str, str]) -> CallbackData:
    sid = params.get("MessageSid") or params.get("SmsSid") or ""
    raw_status = params.get("MessageStatus") or params.get("SmsStatus") or ""
    if not sid or len(sid) > 64:
        raise CallbackInvalid("MessageSid", "missing or too long")
    if not raw_status or len(raw_status) > 32:
        raise CallbackInvalid("MessageStatus", "missing or too long")
    hint = (query.get(HINT_MESSAGE) or "").strip().lower()
    attempt = ascii_int((query.get(HINT_ATTEMPT) or "").strip(), max_digits=5)
    return CallbackData(
        provider_message_id=sid,
        raw_status=raw_status,
        normalized_status=STATUS_MAP.get(raw_status.strip().lower(), ""),
        error_code=(params.get("ErrorCode") or "").strip()[:32],
        done_at=carrier_minute(params.get("RawDlrDoneDate", "")),
        message_hint=hint if HINT_MESSAGE_RE.fullmatch(hint) else "",
        attempt_hint=attempt,
        payload=redact(params),
    )


def validate(
    url: str,
    params: dict,
    headers: Mapping[str, str],
    *,
    auth_token: str,
    shared_keys: dict[str, str],
    previous_auth_token: str = "",
) -> bool:
    """The classic Auth Token signature (HMAC-SHA1), or a SharedKey signature when Twilio announces one
    in ``X-Twilio-Webhooks-Signature-Settings`` (the key must be one we configured: CallbackKeyUnknown
    otherwise, so the caller can tell our missing key from a forged request).

    During a rotation the token being replaced verifies too: Twilio signs with the account's primary
    token, which stays the old one until the new (secondary) token is promoted, and a callback already
    queued at Twilio may arrive after the promotion ("Auth Tokens and How to Change Them",
    help.twilio.com/articles/223136027; twilio.com/docs/iam/api/authtoken)."""
    signature = headers.get("X-Twilio-Signature", "")
    if not signature:
        return False
    settings_header = headers.get(SIGNATURE_SETTINGS_HEADER, "")
    if settings_header:
        key_id = ""
        for part in settings_header.split(","):
            name, _, value = part.partition("=")
            if name.strip() == "key":
                key_id = value.strip()
        if not key_id:
            return False
        secret = shared_keys.get(key_id, "")
        if not secret:
            raise CallbackKeyUnknown(key_id)
        return bool(
            RequestValidator(secret).validate(
                url, params, signature, get_signature_algorithm(settings_header)
            )
        )
    if not auth_token:
        return False
    return any(
        RequestValidator(token).validate(url, params, signature)
        for token in (auth_token, previous_auth_token)
        if token
    )


def body_matches(sent: str, stored: str) -> bool:
    """Is ``stored`` (Twilio's copy) exactly the ``sent`` body as Twilio stores it? Twilio's own rewrites
    only: the trial-account prefix ("Sent from your Twilio trial account - ", in Twilio's API responses for
    trial accounts) and Smart Encoding's substitutions (the documented character list). Nothing else, so
    another message that merely ends with ours is not ours (a loose match would leave ours unsent)."""
    if not sent:
        return not stored
    return stored in {form for body in {sent, sent.translate(_SMART)} for form in (body, TRIAL_PREFIX + body)}


# "A message comes in" (twilio.com/docs/messaging/guides/webhook-request, checked 2026-12): MessageSid (and
# its older names SmsMessageSid, SmsSid), AccountSid, MessagingServiceSid when the number is in a service,
# From, To, Body, NumMedia, NumSegments, SmsStatus "received", ApiVersion, and the From*/To* geography
# fields. Kept beside the stored message (inbound.models): these, never the body or the numbers.
INBOUND_KEPT_FIELDS = (
    "AccountSid",
    "ApiVersion",
    "NumMedia",
    "NumSegments",
    "SmsStatus",
    "FromCountry",
    "ToCountry",
)
_SID_RE = re.compile(r"(SM|MM)[0-9a-f]{32}")


def parse_inbound(params: dict) -> InboundMessage:
    """An incoming message, as Twilio posts it. The MessageSid names it: Twilio posts the same sid
    again when it retries (twilio.com/docs/usage/webhooks/webhooks-connection-overrides), so it is what
    a duplicate is told apart by. Raises CallbackInvalid naming a missing or malformed field."""
    sid = str(params.get("MessageSid") or params.get("SmsMessageSid") or "").strip()
    if not _SID_RE.fullmatch(sid):
        raise CallbackInvalid("MessageSid", "missing or not a message sid (SM or MM and 32 hex digits)")
    for name in ("From", "To"):
        if not str(params.get(name) or "").strip():
            raise CallbackInvalid(name, "missing")
    segments = ascii_int(str(params.get("NumSegments") or "1").strip(), max_digits=2) or 1
    return InboundMessage(
        body=str(params.get("Body") or ""),
        from_number=str(params["From"]).strip(),
        to_number=str(params["To"]).strip(),
        sender_pool=str(params.get("MessagingServiceSid") or "")[:64],
        from_field="From",
        to_field="To",
        message_id=sid,
        id_field="MessageSid",
        segments=segments,
        payload={k: str(params[k])[:64] for k in INBOUND_KEPT_FIELDS if params.get(k)},
    )
