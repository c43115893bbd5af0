"""Driving inbound messages in tests: a signed Twilio "A message comes in" POST (each with its own
MessageSid, as Twilio gives every message one), then the inbound processor's pass."""

from __future__ import annotations

import itertools
import secrets

from django.conf import settings
from django.test import Client
from twilio.request_validator import RequestValidator

from inbound.models import InboundMessage
from inbound.process import inbound_process_due
from tests.factories import SENDER

PUBLIC = "https://sms.example.com"
INBOUND = f"{PUBLIC}/inbound/twilio/"
_n = itertools.count(1)


def params(body: str, frm: str, to: str = SENDER, **extra) -> dict:
    return {
        "MessageSid": f"SM{secrets.token_hex(15)}{next(_n) % 100:02d}",
        "AccountSid": settings.TWILIO_ACCOUNT_SID or "AC" + "0" * 32,
        "From": frm,
        "To": to,
        "Body": body,
        "NumMedia": "0",
        **extra,
    }


def post(form: dict, *, tamper: dict | None = None):
    """POST a form signed with the account's auth token (settings.SMSGW_PUBLIC_BASE_URL must be PUBLIC)."""
    signature = RequestValidator(settings.TWILIO_AUTH_TOKEN).compute_signature(INBOUND, form)
    return Client().post("/inbound/twilio/", {**form, **(tamper or {})}, HTTP_X_TWILIO_SIGNATURE=signature)


def reply(body: str, frm: str, to: str = SENDER, **extra) -> InboundMessage:
    """A signed inbound message, stored and processed: its row after processing."""
    form = params(body, frm, to, **extra)
    answer = post(form)
    assert answer.status_code == 200, answer.content
    inbound_process_due()
    return InboundMessage.objects.get(provider="twilio", provider_message_id=form["MessageSid"])
