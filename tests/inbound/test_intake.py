"""Inbound intake and processing (docs/inbound.md): a signed inbound message is stored once before it is
answered, whatever the provider repeats; an unsigned one writes nothing; a long Vonage message is one
message in part order whatever order its parts came in; a message to a number nobody owns is kept; a
reply names the message it answers and shows on that message's timeline; the tenant's message.received
is made once. Real database, the real adapters' parsing and verification, the processor called as the
inbound tick calls it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from inbound import spool
from inbound.models import InboundMessage, InboundPart, InboundState
from inbound.process import inbound_process_due
from receipts.models import WebhookDelivery
from scheduling.lifecycle import transitions
from scheduling.models import MessageEvent, Status
from tests.factories import SENDER, message, recipient, tenant_with_key
from tests.inbound.helpers import configure, twilio_form, twilio_post, vonage_fields, vonage_post

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]
CONTACT = recipient(7)


@pytest.fixture(autouse=True)
def signed(settings):
    configure(settings)
    settings.SMSGW_WEBHOOK_ALLOW_PRIVATE = True


@pytest.fixture
def tenant(db):
    tenant, _ = tenant_with_key("acme")
    tenant.webhook_url = "https://hooks.example.com/sms"
    tenant.webhook_secret = "whsec_" + "a" * 32
    tenant.save(update_fields=["webhook_url", "webhook_secret"])
    return tenant


def received_webhooks() -> list[dict]:
    return [
        d.payload["data"]
        for d in WebhookDelivery.objects.filter(event_type="message.received").order_by("id")
    ]


def test_a_signed_twilio_reply_is_stored_answered_with_empty_twiml_and_reaches_the_tenant_once(tenant):
    form = twilio_form("See you Tuesday", CONTACT, SENDER)
    for _ in range(5):  # the provider's retries: the same MessageSid each time
        resp = twilio_post(form)
        assert resp.status_code == 200 and resp["Content-Type"].startswith("text/xml")
        assert b"<Response></Response>" in resp.content
    stored = InboundMessage.objects.get()
    assert (stored.state, stored.tenant_id, stored.provider_message_id) == (
        "pending",
        None,
        form["MessageSid"],
    )
    assert inbound_process_due() == 1
    assert inbound_process_due() == 0
    stored.refresh_from_db()
    assert (stored.state, stored.tenant_id, stored.keyword, stored.action) == ("routed", tenant.pk, "SEE", "")
    assert stored.conversation == f"{SENDER}:{CONTACT}"
    [data] = received_webhooks()
    assert (data["id"], data["from"], data["to"], data["body"]) == (
        stored.public_id,
        CONTACT,
        SENDER,
        form["Body"],
    )


def test_an_unsigned_or_tampered_inbound_writes_nothing(tenant):
    form = twilio_form("hello", CONTACT, SENDER)
    assert twilio_post(form, token="the-wrong-token").status_code == 403
    assert vonage_post(vonage_fields("hello", CONTACT, SENDER), signed=False).status_code == 403
    assert not InboundMessage.objects.exists() and not InboundPart.objects.exists()


def test_a_signed_inbound_without_its_id_is_a_400_naming_it(tenant):
    form = {
        k: v
        for k, v in twilio_form("hi", CONTACT, SENDER).items()
        if k not in ("MessageSid", "SmsMessageSid")
    }
    resp = twilio_post(form)
    assert resp.status_code == 400 and "MessageSid" in resp.json()["error"]["fields"]
    assert not InboundMessage.objects.exists()


def test_a_vonage_message_in_three_parts_arriving_3_1_2_is_one_message_in_order(tenant):
    texts = {1: "Part one of the reply, ", 2: "then the second part, ", 3: "and the end."}
    for part in (3, 1, 2):
        fields = vonage_fields(
            texts[part],
            CONTACT,
            SENDER,
            concat="true",
            **{"concat-ref": "42", "concat-total": "3", "concat-part": str(part)},
        )
        assert vonage_post(fields).status_code == 200
        if part != 2:
            inbound_process_due()  # an incomplete group waits
            assert not InboundMessage.objects.exists()
    assert inbound_process_due() == 1
    joined = InboundMessage.objects.get()
    assert joined.body == texts[1] + texts[2] + texts[3]
    assert (joined.segments, joined.parts, joined.parts_missing, joined.state) == (3, 3, [], "routed")
    assert [d["body"] for d in received_webhooks()] == [joined.body]


def test_a_part_that_never_comes_stops_holding_the_rest_after_the_wait(tenant, settings):
    settings.INBOUND_PARTS_WAIT_SECONDS = 60
    for part in (1, 3):
        fields = vonage_fields(
            f"p{part} ",
            CONTACT,
            SENDER,
            concat="true",
            **{"concat-ref": "7", "concat-total": "3", "concat-part": str(part)},
        )
        vonage_post(fields)
    inbound_process_due()
    assert not InboundMessage.objects.exists()
    inbound_process_due(now=timezone.now() + timedelta(seconds=61))
    joined = InboundMessage.objects.get()
    assert (joined.body, joined.parts_missing) == ("p1 p3 ", [2])


def test_a_part_repeated_by_the_provider_is_stored_once(tenant):
    fields = vonage_fields(
        "a ", CONTACT, SENDER, concat="true", **{"concat-ref": "9", "concat-total": "2", "concat-part": "1"}
    )
    for _ in range(3):
        assert vonage_post(fields).status_code == 200
    assert InboundPart.objects.count() == 1


def test_a_message_to_a_number_nobody_owns_is_kept_unrouted_not_dropped(tenant):
    twilio_post(twilio_form("who is this?", CONTACT, "+14155550999"))
    inbound_process_due()
    kept = InboundMessage.objects.get()
    assert (kept.state, kept.tenant_id, kept.body) == (InboundState.UNROUTED, None, "who is this?")
    assert not WebhookDelivery.objects.exists()


def test_a_reply_names_the_message_it_answers_and_shows_on_its_timeline(tenant):
    older = message(tenant, to=CONTACT, body="first")
    answered = message(tenant, to=CONTACT, body="Reply C to cancel")
    other_contact = message(tenant, to=recipient(8), body="not this pair")
    for msg in (older, answered, other_contact):
        transitions.transition(
            msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued"
        )
    # Sent (as the send worker stamps it); only a message that went out can be replied to.
    from scheduling.models import Message

    now = timezone.now()
    Message.objects.filter(pk=older.pk).update(status=Status.DELIVERED, sent_at=now - timedelta(hours=2))
    Message.objects.filter(pk__in=[answered.pk, other_contact.pk]).update(
        status=Status.DELIVERED, sent_at=now - timedelta(minutes=5)
    )
    twilio_post(twilio_form("Thanks", CONTACT, SENDER))
    inbound_process_due()
    reply = InboundMessage.objects.get()
    assert reply.in_reply_to == answered.public_id
    [entry] = MessageEvent.objects.filter(message=answered, kind="reply_received")
    assert entry.details == {"inbound": reply.public_id, "keyword": "THANKS", "action": ""}
    assert entry.actor == "recipient" and "Thanks" not in str(entry.details)  # no body on the timeline
    assert not MessageEvent.objects.filter(message__in=[older, other_contact], kind="reply_received").exists()
    assert received_webhooks()[0]["in_reply_to"] == answered.public_id


def test_database_outage_spools_each_inbound_and_the_drain_stores_it_once(
    tenant, settings, tmp_path, monkeypatch
):
    settings.INBOUND_SPOOL_DIR = tmp_path / "inbound-spool"
    spool.spool_drain_from_web.last = 0.0

    def refuse(**_kwargs):
        raise OperationalError("connection refused")

    with monkeypatch.context() as outage:
        outage.setattr("inbound.webhook.inbound_store", refuse)
        forms = [twilio_form(f"reply {i}", CONTACT, SENDER) for i in range(3)]
        for form in [*forms, forms[0]]:  # and one retried by the provider
            assert twilio_post(form).status_code == 200
        assert len(list((tmp_path / "inbound-spool").glob("*.json"))) == 4
        assert not InboundMessage.objects.exists()
    assert spool.spool_drain() == 4
    assert not list((tmp_path / "inbound-spool").glob("*"))
    inbound_process_due()
    assert sorted(InboundMessage.objects.values_list("body", flat=True)) == ["reply 0", "reply 1", "reply 2"]
    assert len(received_webhooks()) == 3


def test_a_message_whose_processing_fails_is_put_back_and_the_others_go_on(tenant, monkeypatch):
    twilio_post(twilio_form("first", CONTACT, SENDER))
    twilio_post(twilio_form("second", recipient(9), SENDER))
    real = __import__("inbound.process", fromlist=["_replied"])._replied

    def fail_for_first(tenant_id, contact, inbound):
        if inbound.body == "first":
            raise RuntimeError("boom")
        return real(tenant_id, contact, inbound)

    monkeypatch.setattr("inbound.process._replied", fail_for_first)
    assert inbound_process_due() == 2
    states = dict(InboundMessage.objects.values_list("body", "state"))
    assert states == {"first": "pending", "second": "routed"}
    first = InboundMessage.objects.get(body="first")
    assert first.tries == 1 and first.next_try_at > timezone.now()
    assert [d["body"] for d in received_webhooks()] == ["second"]
