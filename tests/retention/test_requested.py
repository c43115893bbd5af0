"""Twilio's ContentRetention / AddressRetention through the compatible API (scheduling.facade.requests,
retention.requested): the body discarded as soon as the provider has the message, the number obfuscated
once it is final (the status callbacks owed for it too), other values refused naming the parameter."""

from __future__ import annotations

import pytest
from twilio.base.exceptions import TwilioRestException

from receipts.models import WebhookDelivery
from receipts.webhooks import STATUS_CALLBACK
from retention.content import masked
from scheduling.facade.resources import public_id_of
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from tests.factories import RECIPIENT, SENDER, tenant_with_key
from tests.retention.records import quotes
from tests.scheduling.facade.sdk_client import sdk_in_process

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]


@pytest.fixture
def client(db):
    tenant, key = tenant_with_key("acme")
    return sdk_in_process(tenant.facade_account_sid, key)


def _create(client, **kwargs) -> Message:
    m = client.messages.create(
        to=RECIPIENT,
        from_=SENDER,
        body="secret code 1234",
        status_callback="https://example.com/cb",
        **kwargs,
    )
    return Message.objects.get(public_id=public_id_of(m.sid))


def _to(msg: Message, status: str) -> Message:
    current = Message.objects.get(pk=msg.pk).status
    transitions.transition(msg.pk, from_statuses=[current], to_status=status, kind=f"to_{status}")
    return Message.objects.get(pk=msg.pk)


def test_content_discard_empties_the_body_once_sent_and_keeps_the_number(client):
    msg = _create(client, content_retention="discard")
    assert (msg.content_retention, msg.address_retention) == ("discard", "retain")
    for status in (Status.QUEUED, Status.SENDING):
        assert _to(msg, status).body == "secret code 1234", "the send worker still needs it"
    sent = _to(msg, Status.SENT)
    assert (sent.body, sent.to) == ("", RECIPIENT)
    delivered = _to(msg, Status.DELIVERED)
    assert (delivered.status, delivered.body, delivered.to) == (Status.DELIVERED, "", RECIPIENT)


def test_address_obfuscate_masks_the_number_once_final_and_keeps_the_body(client):
    msg = _create(client, address_retention="obfuscate")
    _to(msg, Status.QUEUED)
    _to(msg, Status.SENDING)
    assert _to(msg, Status.SENT).to == RECIPIENT, "not final yet: a later receipt may still need it"
    delivered = _to(msg, Status.DELIVERED)
    assert (delivered.status, delivered.body, delivered.to) == (
        Status.DELIVERED,
        "secret code 1234",
        masked(RECIPIENT),
    )
    callbacks = WebhookDelivery.objects.filter(message=msg, event_type=STATUS_CALLBACK).order_by("id")
    assert [c.payload["params"]["MessageStatus"] for c in callbacks] == ["sent", "delivered"]
    assert all(not quotes(c.payload, RECIPIENT) for c in callbacks), "the final callback is masked too"


def test_both_on_a_message_that_fails_before_it_was_sent(client):
    msg = _create(client, content_retention="discard", address_retention="obfuscate")
    _to(msg, Status.QUEUED)
    _to(msg, Status.SENDING)
    failed = _to(msg, Status.FAILED)
    assert (failed.status, failed.body, failed.to) == (Status.FAILED, "", masked(RECIPIENT))


def test_retain_and_no_parameter_keep_everything(client):
    for kwargs in ({}, {"content_retention": "retain", "address_retention": "retain"}):
        msg = _create(client, **kwargs)
        for status in (Status.QUEUED, Status.SENDING, Status.SENT, Status.DELIVERED):
            _to(msg, status)
        kept = Message.objects.get(pk=msg.pk)
        assert (kept.status, kept.body, kept.to) == (Status.DELIVERED, "secret code 1234", RECIPIENT)


@pytest.mark.parametrize(
    ("kwargs", "code", "name"),
    [
        ({"content_retention": "debug"}, 30029, "ContentRetention"),
        ({"content_retention": "obfuscate"}, 30029, "ContentRetention"),
        ({"address_retention": "discard"}, 30030, "AddressRetention"),
        ({"address_retention": ""}, 30030, "AddressRetention"),
    ],
)
def test_another_value_is_a_400_naming_the_parameter(client, kwargs, code, name):
    with pytest.raises(TwilioRestException) as err:
        _create(client, **kwargs)
    assert err.value.status == 400 and err.value.code == code and name in err.value.msg
    assert not Message.objects.exists()
