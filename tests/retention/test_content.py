"""retention.content: what removing a message's content means, on live rows and history rows, on both
databases: body, metadata and the full number gone from every table that copies them, the rest kept;
a message the send worker still needs untouched; a repeat changes nothing."""

from __future__ import annotations

import pytest
from django.utils import timezone

from delivery.guards.suppression import suppression_add
from delivery.models import Attempt, OptOutSignal, Suppression
from receipts.models import ReceiptEvent, WebhookDelivery
from retention.content import (
    TABLES,
    history_content_remove,
    masked,
    messages_content_remove,
    scrubbed,
)
from retention.models import MessageHistory
from scheduling.models import Message, Status
from tests.factories import RECIPIENT, message, tenant_with_key
from tests.retention.records import copies_make, history_make, quotes

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


def _final(tenant, status=Status.DELIVERED, to=RECIPIENT):
    msg = message(tenant, status=status, to=to, body="secret code 1234")
    Message.objects.filter(pk=msg.pk).update(metadata={"order": "A-1"})
    msg.refresh_from_db()
    copies_make(msg)
    return msg


def _nothing_quotes(msg_pk: int, number: str) -> None:
    msg = Message.objects.get(pk=msg_pk)
    assert msg.body == "" and msg.metadata == {} and msg.to == masked(number) and "*" in msg.to
    assert msg.to.startswith("+1415"), "the country stays"
    for details in msg.events.values_list("details", flat=True):
        assert not quotes(details, number) and "secret" not in str(details)
    for response in Attempt.objects.filter(message_id=msg_pk).values_list("response", flat=True):
        assert not quotes(response, number)
    for payload in ReceiptEvent.objects.filter(message_id=msg_pk).values_list("payload", flat=True):
        assert not quotes(payload, number)
    for payload in WebhookDelivery.objects.filter(message_id=msg_pk).values_list("payload", flat=True):
        assert not quotes(payload, number) and "A-1" not in str(payload)
    assert not OptOutSignal.objects.filter(message_id=msg_pk, to=number).exists()


def test_a_final_message_loses_its_content_everywhere_and_keeps_its_evidence(tenant):
    msg = _final(tenant)
    counts = messages_content_remove(message_ids=[msg.pk], now=timezone.now())
    assert counts == {
        "messages": 1,
        "message_events": 1,
        "attempts": 1,
        "receipt_events": 1,
        "webhook_deliveries": 2,
        "opt_out_signals": 1,
    }
    _nothing_quotes(msg.pk, RECIPIENT)
    kept = Message.objects.get(pk=msg.pk)
    assert kept.status == Status.DELIVERED and kept.public_id == msg.public_id
    assert kept.events.count() == 2 and Attempt.objects.filter(message=msg).count() == 1
    hook = WebhookDelivery.objects.get(message=msg, event_type="message.status")
    assert hook.payload["data"]["id"] == msg.public_id and hook.payload["data"]["metadata"] == {}
    assert Attempt.objects.get(message=msg).response["http_status"] == 400


def test_a_repeat_changes_nothing(tenant):
    msg = _final(tenant)
    messages_content_remove(message_ids=[msg.pk], now=timezone.now())
    before = Message.objects.get(pk=msg.pk).to
    assert messages_content_remove(message_ids=[msg.pk, msg.pk], now=timezone.now()) == dict.fromkeys(
        TABLES, 0
    )
    assert Message.objects.get(pk=msg.pk).to == before, "a masked number is not masked again"


def test_a_message_still_to_be_sent_is_never_touched(tenant):
    waiting = [_final(tenant, status=s) for s in (Status.SCHEDULED, Status.QUEUED, Status.SENDING)]
    sent = _final(tenant, status=Status.SENT)
    counts = messages_content_remove(message_ids=[m.pk for m in [*waiting, sent]], now=timezone.now())
    assert counts["messages"] == 1
    for msg in waiting:
        kept = Message.objects.get(pk=msg.pk)
        assert kept.body == "secret code 1234" and kept.to == RECIPIENT and kept.metadata == {"order": "A-1"}
        assert kept.status == msg.status
        assert WebhookDelivery.objects.get(message=msg, event_type="message.status").payload["data"][
            "to"
        ] == (RECIPIENT)
    _nothing_quotes(sent.pk, RECIPIENT)
    assert Message.objects.get(pk=sent.pk).status == Status.SENT


def test_with_an_actor_each_changed_message_gets_one_redacted_entry(tenant):
    msg = _final(tenant, status=Status.FAILED)
    messages_content_remove(message_ids=[msg.pk], now=timezone.now(), actor="apikey:abc")
    messages_content_remove(message_ids=[msg.pk], now=timezone.now(), actor="apikey:abc")
    entries = Message.objects.get(pk=msg.pk).events.filter(kind="redacted")
    assert [(e.actor, e.to_status) for e in entries] == [("apikey:abc", Status.FAILED)]


def test_the_suppression_list_is_not_content(tenant):
    suppression_add(tenant_id=tenant.pk, number=RECIPIENT, source="api", actor="test")
    msg = _final(tenant, status=Status.FAILED)
    messages_content_remove(message_ids=[msg.pk], now=timezone.now())
    assert Suppression.objects.filter(tenant=tenant, number=RECIPIENT).count() == 1


def test_many_messages_are_read_in_chunks_and_all_done(tenant, monkeypatch):
    monkeypatch.setattr("retention.content.CHUNK", 3)
    msgs = [message(tenant, status=Status.DELIVERED, to=f"+1415555{i:04d}") for i in range(100, 108)]
    counts = messages_content_remove(message_ids=[m.pk for m in msgs], now=timezone.now())
    assert counts["messages"] == 8
    assert all(m.body == "" and "*" in m.to for m in Message.objects.filter(pk__in=[x.pk for x in msgs]))


def test_a_history_row_loses_its_content_and_its_redaction_day(tenant):
    row = history_make(tenant, pk=10_001, to=RECIPIENT)
    assert history_content_remove(ids=[row.pk], now=timezone.now()) == {"message_history": 1}
    row.refresh_from_db()
    assert row.to == masked(RECIPIENT) and row.redact_on is None
    assert not quotes(row.document, RECIPIENT) and "secret" not in str(row.document)
    assert "A-1" not in str(row.document)
    assert row.document["message"]["body"] == "" and row.document["message"]["metadata"] == {}
    assert row.document["message"]["status"] == "delivered", "the evidence stays"
    assert [e["kind"] for e in row.document["events"]] == ["created", "note"]
    assert history_content_remove(ids=[row.pk, row.pk], now=timezone.now()) == {"message_history": 0}


def test_a_history_row_whose_column_was_masked_still_loses_the_number_in_its_document(tenant):
    row = history_make(tenant, pk=10_002, to=RECIPIENT)
    MessageHistory.objects.filter(pk=row.pk).update(to=masked(RECIPIENT))
    history_content_remove(ids=[row.pk], now=timezone.now(), actor="apikey:abc")
    row.refresh_from_db()
    assert not quotes(row.document, RECIPIENT)
    assert row.document["events"][-1]["kind"] == "redacted" and row.document["events"][-1]["actor"] == (
        "apikey:abc"
    )


def test_scrub_keeps_shapes_and_other_numbers():
    doc = {"body": "x", "metadata": {"a": 1}, "to": RECIPIENT, "n": [f"{RECIPIENT} and +12025550143"]}
    out = scrubbed(doc, [RECIPIENT])
    assert out == {
        "body": "",
        "metadata": {},
        "to": masked(RECIPIENT),
        "n": [f"{masked(RECIPIENT)} and +12025550143"],
    }
    assert scrubbed(out, [RECIPIENT]) == out
