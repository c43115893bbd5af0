"""Twilio programs work unchanged (issue 41 point 4, docs/inbound.md "Twilio programs"): the official Twilio
Python SDK sets a number's SmsUrl through smsgw (IncomingPhoneNumbers), a reply to that number reaches it
in Twilio's form with a signature the SDK's RequestValidator accepts, and the program's TwiML <Message>
answer is sent back once, however often the forward is delivered."""

from __future__ import annotations

import itertools
from urllib.parse import parse_qsl, urlsplit

import pytest
from django.utils import timezone
from twilio.request_validator import RequestValidator

from delivery.providers.types import InboundMessage as Parsed
from inbound.intake import inbound_store
from inbound.models import InboundMessage
from inbound.process import inbound_process_due
from receipts.models import WebhookDelivery, WebhookStatus
from receipts.webhooks import INCOMING_FORWARD, webhook_replay, webhooks_deliver_due
from scheduling.facade.resources import inbound_sid, public_id_of
from scheduling.models import Message, MessageEvent
from tests.factories import RECIPIENT, SENDER, tenant_with_key
from tests.scheduling.facade.sdk_client import sdk_in_process
from tests.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.django_db
_ids = itertools.count(1)
# What Twilio posts when a message comes in (twilio.com/docs/messaging/guides/webhook-request).
TWILIO_FIELDS = {
    "MessageSid",
    "SmsMessageSid",
    "SmsSid",
    "AccountSid",
    "From",
    "To",
    "Body",
    "NumMedia",
    "NumSegments",
    "SmsStatus",
    "ApiVersion",
}


@pytest.fixture
def account(settings):
    settings.WEBHOOK_ALLOW_PRIVATE = settings.WEBHOOK_ALLOW_HTTP = True  # the receiver is on loopback
    return tenant_with_key("acme", allowed_countries=["US", "GB"])


@pytest.fixture
def client(account):
    tenant, key = account
    return sdk_in_process(tenant.facade_account_sid, key)


@pytest.fixture
def program():
    receivers: list[WebhookReceiver] = []

    def start(answer: bytes = b"") -> WebhookReceiver:
        receivers.append(WebhookReceiver(answer=answer).start())
        return receivers[-1]

    yield start
    for receiver in receivers:
        receiver.stop()


def _point(client, url: str, **kwargs) -> str:
    """What a Twilio program does: find its number and set its SmsUrl. The number's PN SID."""
    (number,) = client.incoming_phone_numbers.list(phone_number=SENDER)
    updated = client.incoming_phone_numbers(number.sid).update(sms_url=url, **kwargs)
    assert updated.sms_url == url
    return number.sid


def _reply_comes_in(body: str) -> InboundMessage:
    stored = inbound_store(
        provider="twilio",
        inbound=Parsed(body=body, from_number=RECIPIENT, to_number=SENDER, message_id=f"SM{next(_ids):032x}"),
        received_at=timezone.now(),
    )
    inbound_process_due()
    return InboundMessage.objects.get(pk=stored.id)


def _deliver_all() -> None:
    while webhooks_deliver_due():
        pass


def _replies(tenant) -> list[Message]:
    return list(Message.objects.filter(tenant=tenant, to=RECIPIENT, from_number=SENDER).order_by("id"))


def test_a_reply_reaches_the_sms_url_in_twilios_signed_form(account, client, program):
    tenant, _ = account
    receiver = program()
    _point(client, receiver.url + "?shop=1")
    inbound = _reply_comes_in("Yes, see you Tuesday")
    _deliver_all()

    (got,) = receiver.received
    params = dict(parse_qsl(got["body"]))
    assert set(params) == TWILIO_FIELDS
    sid = inbound_sid(inbound.public_id)
    assert sid.startswith("SM") and len(sid) == 34 and public_id_of(sid) is None
    assert params == {
        "MessageSid": sid,
        "SmsMessageSid": sid,
        "SmsSid": sid,
        "AccountSid": tenant.facade_account_sid,
        "From": RECIPIENT,
        "To": SENDER,
        "Body": "Yes, see you Tuesday",
        "NumMedia": "0",
        "NumSegments": "1",
        "SmsStatus": "received",
        "ApiVersion": "2010-04-01",
    }
    url = f"http://127.0.0.1:{receiver.port}{got['path']}"
    validator = RequestValidator(tenant.callback_signing_key)
    assert validator.validate(url, params, got["headers"]["x-twilio-signature"])
    assert not validator.validate(url, {**params, "Body": "No"}, got["headers"]["x-twilio-signature"])
    delivery = WebhookDelivery.objects.get(event_type=INCOMING_FORWARD)
    assert got["headers"]["i-twilio-idempotency-token"] == delivery.webhook_id
    assert delivery.status == WebhookStatus.DELIVERED
    assert _replies(tenant) == []  # an empty answer sends nothing


def test_sms_method_get_puts_the_signed_form_in_the_url(account, client, program):
    tenant, _ = account
    receiver = program()
    _point(client, receiver.url, sms_method="GET")
    _reply_comes_in("C")
    _deliver_all()
    (got,) = receiver.received
    assert got["method"] == "GET" and got["body"] == ""
    params = dict(parse_qsl(urlsplit(got["path"]).query))
    assert params["Body"] == "C" and params["SmsStatus"] == "received"
    url = f"http://127.0.0.1:{receiver.port}{got['path']}"
    assert RequestValidator(tenant.callback_signing_key).validate(
        url, {}, got["headers"]["x-twilio-signature"]
    )


def test_a_twiml_message_answer_is_sent_once_however_often_it_is_delivered(account, client, program):
    tenant, _ = account
    receiver = program(
        b'<?xml version="1.0" encoding="UTF-8"?><Response><Message>See you then</Message></Response>'
    )
    _point(client, receiver.url)
    inbound = _reply_comes_in("Yes")
    _deliver_all()
    (reply,) = _replies(tenant)
    assert reply.body == "See you then" and reply.metadata == {"in_reply_to": inbound.public_id}
    created = MessageEvent.objects.get(message=reply, kind="created")
    assert created.actor == "twiml"

    delivery = WebhookDelivery.objects.get(event_type=INCOMING_FORWARD)
    for _ in range(2):  # replayed by an operator: the program answers again, nothing more is sent
        webhook_replay(tenant=tenant, webhook_id=delivery.webhook_id)
        _deliver_all()
    assert len(receiver.received) == 3
    assert _replies(tenant) == [reply]
    delivery.refresh_from_db()
    assert "already sent" in delivery.history[-1]["answer"]


def test_several_messages_body_nouns_and_attributes_and_what_is_left_out(account, client, program):
    tenant, _ = account
    other = "+14155550199"
    answer = (
        b"<Response>"
        b"<Message><Body>First</Body><Media>https://example.com/cat.jpg</Media></Message>"
        b'<Message to="+14155550199" action="/status">Second</Message>'
        b"<Redirect>/next</Redirect>"
        b"</Response>"
    )
    _point(client, program(answer).url)
    _reply_comes_in("Hi")
    _deliver_all()
    assert [m.body for m in _replies(tenant)] == ["First"]
    (second,) = Message.objects.filter(tenant=tenant, to=other)
    assert second.body == "Second" and second.from_number == SENDER
    note = WebhookDelivery.objects.get(event_type=INCOMING_FORWARD).history[-1]["answer"]
    assert "left out: Media, Message@action, Redirect" in note


@pytest.mark.parametrize(
    "answer",
    [
        b"<Response><Message>unclosed",
        b"not xml at all",
        b"<Html><Message>x</Message></Html>",
        b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]>'
        b"<Response><Message>&b;</Message></Response>",
        b"<Response>" + b"<Message>x</Message>" * 300 + b"</Response>",
    ],
    ids=["unclosed", "text", "wrong-root", "entities", "too-many-elements"],
)
def test_a_malformed_answer_is_recorded_and_sends_nothing(account, client, program, answer, settings):
    settings.WEBHOOK_MAX_RESPONSE_BYTES = 65536
    tenant, _ = account
    _point(client, program(answer).url)
    _reply_comes_in("Hi")
    _deliver_all()
    delivery = WebhookDelivery.objects.get(event_type=INCOMING_FORWARD)
    assert delivery.status == WebhookStatus.DELIVERED
    assert delivery.history[-1]["answer"].startswith("TwiML not taken")
    assert Message.objects.filter(tenant=tenant).count() == 0


def test_a_number_without_sms_url_and_an_unrouted_reply_forward_nothing(account, program):
    _reply_comes_in("Hi")
    inbound_store(
        provider="twilio",
        inbound=Parsed(
            body="Hi", from_number=RECIPIENT, to_number="+14155550188", message_id="SM" + "f" * 32
        ),
        received_at=timezone.now(),
    )
    inbound_process_due()
    assert not WebhookDelivery.objects.filter(event_type=INCOMING_FORWARD).exists()
