"""POST /v1/messages/{id}/redact and the Twilio-compatible Body="" (one service, retention.redact): a
message's content removed at once wherever it lives, 409 before it is sent, 404 for another tenant's or
an unknown id, a repeat changes nothing, each call audited without the number."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from receipts.models import WebhookDelivery
from retention.content import masked
from retention.models import MessageHistory, RetentionAction, RetentionAudit
from scheduling.facade.resources import message_sid
from scheduling.models import Message, Status
from smsgw.models import ApiKey
from tests.factories import RECIPIENT, message, tenant_with_key
from tests.retention.records import copies_make, history_make, quotes
from tests.scheduling.facade.sdk_client import sdk_in_process

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]


@pytest.fixture
def account(db):
    return tenant_with_key("acme")


def _api(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def _sent(tenant, status=Status.DELIVERED) -> Message:
    msg = message(tenant, status=status, body="secret code 1234")
    copies_make(msg)
    return msg


def _audits_hold_no_number() -> None:
    for audit in RetentionAudit.objects.all():
        assert not quotes(audit.counts, RECIPIENT) and not quotes(audit.subject, RECIPIENT)
        assert not quotes(audit.actor, RECIPIENT)


def test_redact_removes_the_content_now_and_audits_who_and_how_many(account):
    tenant, key = account
    msg = _sent(tenant)
    resp = _api(key).post(f"/v1/messages/{msg.public_id}/redact")
    assert resp.status_code == 200, resp.content
    data = resp.json()
    assert data["id"] == msg.public_id and data["status"] == "delivered" and data["place"] == "live"
    assert data["counts"]["messages"] == 1 and data["counts"]["webhook_deliveries"] == 2
    kept = Message.objects.get(pk=msg.pk)
    assert kept.body == "" and kept.to == masked(RECIPIENT) and kept.status == Status.DELIVERED
    assert not any(quotes(p, RECIPIENT) for p in WebhookDelivery.objects.values_list("payload", flat=True))
    actor = f"apikey:{ApiKey.objects.get().prefix}"
    assert list(kept.events.filter(kind="redacted").values_list("actor", flat=True)) == [actor]
    audit = RetentionAudit.objects.get()
    assert (audit.tenant_id, audit.action, audit.actor, audit.subject) == (
        tenant.pk,
        RetentionAction.REDACT,
        actor,
        msg.public_id,
    )
    assert audit.counts == data["counts"]
    # the message API shows it redacted
    shown = _api(key).get(f"/v1/messages/{msg.public_id}").json()
    assert shown["body"] == "" and shown["to"] == masked(RECIPIENT)
    _audits_hold_no_number()


def test_a_repeat_is_200_and_changes_nothing(account):
    tenant, key = account
    msg = _sent(tenant, status=Status.SENT)
    assert _api(key).post(f"/v1/messages/{msg.public_id}/redact").status_code == 200
    again = _api(key).post(f"/v1/messages/{msg.public_id}/redact")
    assert again.status_code == 200 and set(again.json()["counts"].values()) == {0}
    assert Message.objects.get(pk=msg.pk).events.filter(kind="redacted").count() == 1
    assert Message.objects.get(pk=msg.pk).status == Status.SENT
    assert RetentionAudit.objects.count() == 2, "each request is audited"


@pytest.mark.parametrize("status", [Status.SCHEDULED, Status.QUEUED, Status.SENDING])
def test_a_message_still_to_be_sent_is_a_409_and_keeps_everything(account, status):
    tenant, key = account
    msg = _sent(tenant, status=status)
    resp = _api(key).post(f"/v1/messages/{msg.public_id}/redact")
    assert resp.status_code == 409, resp.content
    assert resp.json()["error"]["code"] == "conflict" and status in resp.json()["error"]["message"]
    kept = Message.objects.get(pk=msg.pk)
    assert (kept.body, kept.to, kept.status) == ("secret code 1234", RECIPIENT, status)
    assert not RetentionAudit.objects.exists()


def test_another_tenants_message_or_an_unknown_id_is_a_404(account):
    _tenant, key = account
    other, _ = tenant_with_key("other")
    theirs = _sent(other)
    for public_id in (theirs.public_id, "msg_" + "0" * 24, "nonsense"):
        resp = _api(key).post(f"/v1/messages/{public_id}/redact")
        assert resp.status_code == 404, resp.content
    kept = Message.objects.get(pk=theirs.pk)
    assert kept.body == "secret code 1234" and kept.to == RECIPIENT
    assert not RetentionAudit.objects.exists()


def test_a_message_already_in_history_is_redacted_there(account):
    tenant, key = account
    row = history_make(tenant, pk=900_001, to=RECIPIENT)
    other, _ = tenant_with_key("other")
    theirs = history_make(other, pk=900_002, to=RECIPIENT)
    resp = _api(key).post(f"/v1/messages/{row.public_id}/redact")
    assert resp.status_code == 200, resp.content
    assert resp.json()["place"] == "history" and resp.json()["counts"] == {"message_history": 1}
    row.refresh_from_db()
    assert row.to == masked(RECIPIENT) and row.redact_on is None and not quotes(row.document, RECIPIENT)
    assert row.document["events"][-1]["kind"] == "redacted"
    assert _api(key).post(f"/v1/messages/{theirs.public_id}/redact").status_code == 404
    assert MessageHistory.objects.get(pk=theirs.pk).to == RECIPIENT
    again = _api(key).post(f"/v1/messages/{row.public_id}/redact")
    assert again.status_code == 200 and again.json()["counts"] == {"message_history": 0}
    _audits_hold_no_number()


def test_twilio_body_empty_is_the_same_redaction(account):
    tenant, key = account
    msg = _sent(tenant)
    client = sdk_in_process(tenant.facade_account_sid, key)
    redacted = client.messages(message_sid(msg.public_id)).update(body="")
    assert redacted.body == "" and redacted.to == masked(RECIPIENT) and redacted.status == "delivered"
    kept = Message.objects.get(pk=msg.pk)
    assert kept.body == "" and kept.events.filter(kind="redacted").count() == 1
    audit = RetentionAudit.objects.get()
    assert audit.action == RetentionAction.REDACT and audit.subject == msg.public_id
    # a repeat through the compatible API: the same answer, nothing more changed
    assert client.messages(message_sid(msg.public_id)).update(body="").body == ""
    assert kept.events.filter(kind="redacted").count() == 1
    _audits_hold_no_number()


def test_a_message_taken_back_for_a_resend_meanwhile_is_a_409_and_keeps_its_body(account, monkeypatch):
    """The provider reported a resendable failure between the read and the removal (sent -> queued): the
    send worker needs the body again, so nothing is removed and nothing audited."""
    from retention import redact
    from scheduling.lifecycle import transitions

    tenant, key = account
    msg = _sent(tenant, status=Status.SENT)
    real = redact.messages_content_remove

    def raced(**kwargs):
        transitions.transition(msg.pk, from_statuses=[Status.SENT], to_status=Status.QUEUED, kind="requeued")
        return real(**kwargs)

    monkeypatch.setattr(redact, "messages_content_remove", raced)
    resp = _api(key).post(f"/v1/messages/{msg.public_id}/redact")
    assert resp.status_code == 409 and resp.json()["error"]["status"] == "queued", resp.content
    kept = Message.objects.get(pk=msg.pk)
    # (The race is simulated inside the redaction's transaction, so the refusal rolls it back too.)
    assert (kept.body, kept.to) == ("secret code 1234", RECIPIENT)
    assert not kept.events.filter(kind="redacted").exists() and not RetentionAudit.objects.exists()


def test_a_message_moved_to_history_meanwhile_is_redacted_there(account, monkeypatch):
    from retention import redact

    tenant, key = account
    msg = _sent(tenant)
    real = redact.messages_content_remove

    def moved(**kwargs):
        history_make(tenant, pk=msg.pk, to=RECIPIENT)
        MessageHistory.objects.filter(pk=msg.pk).update(public_id=msg.public_id)
        Message.objects.filter(pk=msg.pk).delete()
        monkeypatch.setattr(redact, "messages_content_remove", real)
        return real(**kwargs)

    monkeypatch.setattr(redact, "messages_content_remove", moved)
    resp = _api(key).post(f"/v1/messages/{msg.public_id}/redact")
    assert resp.status_code == 200 and resp.json()["place"] == "history", resp.content
    row = MessageHistory.objects.get(pk=msg.pk)
    assert row.to == masked(RECIPIENT) and not quotes(row.document, RECIPIENT)
