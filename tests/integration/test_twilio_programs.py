"""A Twilio program that receives replies, against a live gunicorn, real workers and beat, and the Twilio
sandbox (issue 41 point 4, docs/inbound.md "Twilio programs"): the official SDK sets its number's SmsUrl
through smsgw; a signed inbound message posted to /inbound/twilio/ (twice: a provider retry) reaches the
program once, in Twilio's form with a signature the SDK's RequestValidator accepts; the program's TwiML
<Message> answer is sent to the contact from that number, once, and delivered."""

from __future__ import annotations

import urllib.parse
import urllib.request
from urllib.parse import parse_qsl

import pytest
from twilio.request_validator import RequestValidator

from scheduling.models import Message, MessageEvent, Status
from tests.factories import RECIPIENT, SENDER, tenant_with_key
from tests.harness import start_web
from tests.scheduling.facade.sdk_client import sdk_client
from tests.waiting import wait_for
from tests.webhook_receiver import WebhookReceiver

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
TWIML = b'<?xml version="1.0" encoding="UTF-8"?><Response><Message>See you Tuesday!</Message></Response>'


def _post_inbound(base: str, token: str, params: dict) -> int:
    """What Twilio does when a message comes in: the form, signed with the account's auth token."""
    url = f"{base}/inbound/twilio/"
    signature = RequestValidator(token).compute_signature(url, params)
    request = urllib.request.Request(
        url, data=urllib.parse.urlencode(params).encode(), headers={"X-Twilio-Signature": signature}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return resp.status


def test_a_twilio_program_gets_the_reply_signed_and_its_twiml_is_sent_once(pipeline):
    tenant, key = tenant_with_key("acme", allowed_countries=["US"])
    program = WebhookReceiver(answer=TWIML).start()
    try:
        base = start_web(pipeline, SMSGW_WEBHOOK_ALLOW_PRIVATE="1", SMSGW_WEBHOOK_ALLOW_HTTP="1")
        pipeline.worker()
        pipeline.beat()
        client = sdk_client(base, tenant.facade_account_sid, key)
        (number,) = client.incoming_phone_numbers.list(phone_number=SENDER)
        assert client.incoming_phone_numbers(number.sid).update(sms_url=program.url).sms_url == program.url

        inbound = {
            "MessageSid": "SM" + "7" * 32,
            "AccountSid": "AC" + "0" * 32,
            "From": RECIPIENT,
            "To": SENDER,
            "Body": "Yes, Tuesday works",
            "NumSegments": "1",
            "NumMedia": "0",
            "SmsStatus": "received",
            "ApiVersion": "2010-04-01",
        }
        token = pipeline.sandbox.auth_token
        assert _post_inbound(base, token, inbound) == 200
        assert _post_inbound(base, token, inbound) == 200  # Twilio's retry: the same MessageSid

        def reply_delivered() -> bool:
            return Message.objects.filter(tenant=tenant, to=RECIPIENT, status=Status.DELIVERED).exists()

        pipeline.wait_until(reply_delivered, 90, "the TwiML reply delivered")
        wait_for(lambda: len(program.received) >= 1, 30, "the forwarded reply")
        (got,) = program.received  # once, though the provider posted it twice
        params = dict(parse_qsl(got["body"]))
        assert (
            params["Body"] == "Yes, Tuesday works" and params["From"] == RECIPIENT and params["To"] == SENDER
        )
        assert params["AccountSid"] == tenant.facade_account_sid and params["SmsStatus"] == "received"
        url = f"http://127.0.0.1:{program.port}{got['path']}"
        assert RequestValidator(tenant.callback_signing_key).validate(
            url, params, got["headers"]["x-twilio-signature"]
        )
        (reply,) = Message.objects.filter(tenant=tenant, to=RECIPIENT)
        assert (reply.body, reply.from_number, reply.status) == ("See you Tuesday!", SENDER, Status.DELIVERED)
        assert MessageEvent.objects.get(message=reply, kind="created").actor == "twiml"
    finally:
        program.stop()
