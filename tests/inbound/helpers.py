"""Signed inbound webhooks as Twilio and Vonage post them, for the inbound tests."""

from __future__ import annotations

import itertools
import secrets
import time

from django.test import Client
from twilio.request_validator import RequestValidator

from delivery.providers.vonage.sandbox.parts import signature

PUBLIC = "https://sms.example.com"
TWILIO_TOKEN = "inbound-test-token"
VONAGE_SECRET = "inbound-signature-secret"
VONAGE_KEY = "a1b2c3d4"
_nonces = itertools.count()


def configure(settings) -> None:
    from delivery.providers import get_adapter

    settings.SMSGW_PUBLIC_BASE_URL = PUBLIC
    settings.TWILIO_AUTH_TOKEN = TWILIO_TOKEN
    settings.VONAGE_API_KEY = VONAGE_KEY
    settings.VONAGE_SIGNATURE_SECRET = VONAGE_SECRET
    settings.VONAGE_SIGNATURE_METHOD = "sha256"
    get_adapter.cache_clear()


def twilio_sid() -> str:
    return "SM" + secrets.token_hex(16)


def twilio_form(body: str, frm: str, to: str, *, sid: str | None = None, **extra) -> dict:
    # "A message comes in" (twilio.com/docs/messaging/guides/webhook-request).
    sid = sid or twilio_sid()
    return {
        "MessageSid": sid,
        "SmsMessageSid": sid,
        "SmsSid": sid,
        "AccountSid": "AC" + "0" * 32,
        "From": frm,
        "To": to,
        "Body": body,
        "NumMedia": "0",
        "NumSegments": "1",
        "SmsStatus": "received",
        "ApiVersion": "2010-04-01",
        **extra,
    }


def twilio_post(params: dict, *, token: str = TWILIO_TOKEN, base: str = PUBLIC):
    signature_ = RequestValidator(token).compute_signature(f"{base}/inbound/twilio/", params)
    return Client().post("/inbound/twilio/", params, HTTP_X_TWILIO_SIGNATURE=signature_)


def vonage_fields(text: str, frm: str, to: str, *, message_id: str | None = None, **extra) -> dict:
    # The inbound SMS webhook (developer.vonage.com/messaging/sms/guides/inbound-sms): numbers without "+".
    return {
        "msisdn": frm.lstrip("+"),
        "to": to.lstrip("+"),
        "messageId": message_id or secrets.token_hex(8).upper(),
        "text": text,
        "type": "text",
        "keyword": (text.split() or [""])[0].upper(),
        "message-timestamp": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        **extra,
    }


def vonage_sign(fields: dict) -> dict:
    params = {
        **fields,
        "api-key": VONAGE_KEY,
        "timestamp": str(int(time.time())),
        "nonce": f"n{next(_nonces)}",
    }
    return {**params, "sig": signature(params, VONAGE_SECRET, "sha256")}


def vonage_post(fields: dict, *, signed: bool = True):
    params = vonage_sign(fields) if signed else fields
    return Client().post("/inbound/vonage/", params, content_type="application/json")
