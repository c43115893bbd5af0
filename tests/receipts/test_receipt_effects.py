"""What each provider status and error class does to a message, and receipts for sids a message never
recorded (the signed callback URL names the message and attempt): found, late-found, duplicate,
superseded. Signatures are made with the twilio SDK's own validator code."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone
from twilio.request_validator import RequestValidator

from delivery.models import (
    Attempt,
    AttemptOutcome,
    DuplicateSubmission,
    OptOutSignal,
    ProviderHold,
    Suppression,
    SuppressionChange,
)
from receipts.models import ReceiptEvent, ReceiptOutcome
from receipts.processor import receipts_process_due
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from tests.factories import message, tenant_with_key

pytestmark = pytest.mark.django_db
PUBLIC = "https://sms.example.com"
TOKEN = "receipt-test-token"


@pytest.fixture
def cfg(settings):
    settings.SMSGW_PUBLIC_BASE_URL = PUBLIC
    settings.TWILIO_AUTH_TOKEN = TOKEN
    settings.TWILIO_WEBHOOK_SHARED_KEYS = {"wk1": "shared-secret"}
    from delivery.flow import provider_holds as holds
    from delivery.providers import get_adapter

    get_adapter.cache_clear()
    holds._cache.clear()
    yield settings
    get_adapter.cache_clear()
    holds._cache.clear()


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


def post(params: dict, *, msg: Message | None = None, attempt: int = 1, shared_key: bool = False):
    query = f"?m={msg.public_id.removeprefix('msg_')}&a={attempt}" if msg else ""
    path = f"/receipts/twilio/{query}"
    if shared_key:
        signature = RequestValidator("shared-secret").compute_signature(PUBLIC + path, params, "HMAC_SHA256")
        return Client().post(
            path,
            params,
            HTTP_X_TWILIO_SIGNATURE=signature,
            HTTP_X_TWILIO_WEBHOOKS_SIGNATURE_SETTINGS="key=wk1,algorithm=HMAC_SHA256",
        )
    signature = RequestValidator(TOKEN).compute_signature(PUBLIC + path, params)
    return Client().post(path, params, HTTP_X_TWILIO_SIGNATURE=signature)


def callback(sid: str, status: str, **extra) -> dict:
    return {
        "MessageSid": sid,
        "SmsSid": sid,
        "MessageStatus": status,
        "SmsStatus": status,
        "AccountSid": "AC" + "0" * 32,
        "From": "+14155550100",
        "To": "+14155550123",
        "ApiVersion": "2010-04-01",
        **extra,
    }


def sending_message(tenant, *, attempt_outcome=AttemptOutcome.PENDING) -> Message:
    msg = message(tenant)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    transitions.transition(
        msg.pk,
        from_statuses=[Status.QUEUED],
        to_status=Status.SENDING,
        kind="attempt_started",
        set_fields={
            "provider": "twilio",
            "attempt_count": 1,
            "provider_calls": 1,
            "sending_at": timezone.now(),
        },
    )
    Attempt.objects.create(
        message=msg,
        number=1,
        provider="twilio",
        idempotency_token="t1",
        started_at=timezone.now(),
        outcome=attempt_outcome,
    )
    msg.refresh_from_db()
    return msg


def sent_message(tenant, sid: str) -> Message:
    msg = sending_message(tenant)
    transitions.transition(
        msg.pk,
        from_statuses=[Status.SENDING],
        to_status=Status.SENT,
        kind="sent",
        set_fields={"provider_message_id": sid, "sent_at": timezone.now()},
    )
    Attempt.objects.filter(message=msg).update(outcome=AttemptOutcome.ACCEPTED, provider_message_id=sid)
    msg.refresh_from_db()
    return msg


def drain():
    for _ in range(5):
        ReceiptEvent.objects.filter(processed_at__isnull=True).update(next_try_at=timezone.now())
        if not receipts_process_due():
            return


def sid(n: int) -> str:
    return f"SM{n:032x}"


def test_failed_with_queue_overflow_is_sent_again_not_failed(cfg, tenant):
    msg = sent_message(tenant, sid(1))
    assert post(callback(sid(1), "failed", ErrorCode="30001"), msg=msg).status_code == 201
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.QUEUED and msg.reason_code == "provider_throttled"
    assert msg.provider_message_id is None and msg.attempt_count == 0, "uncharged, off the failed sid"
    assert msg.run_after > timezone.now()
    assert Attempt.objects.get(message=msg).outcome == AttemptOutcome.REJECTED
    # A late callback for that sid (here its `queued`, overtaken) is the superseded attempt's, not a
    # second submission.
    post(callback(sid(1), "queued"), msg=msg)
    drain()
    assert ReceiptEvent.objects.order_by("-id")[0].outcome == ReceiptOutcome.SUPERSEDED
    assert not DuplicateSubmission.objects.exists()


def test_failed_opted_out_fails_with_reason_and_feeds_the_suppression_record(cfg, tenant):
    msg = sent_message(tenant, sid(2))
    post(callback(sid(2), "failed", ErrorCode="21610"), msg=msg)
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.FAILED and msg.reason_code == "opted_out"
    assert OptOutSignal.objects.get().to == msg.to
    entry = Suppression.objects.get()
    assert (entry.tenant_id, entry.number, entry.sender, entry.source) == (
        tenant.pk,
        msg.to,
        msg.from_number,
        "provider_error",
    )
    assert SuppressionChange.objects.get().source == "provider_error"


def test_failed_unregistered_sender_holds_the_sender_and_requeues(cfg, tenant):
    msg = sent_message(tenant, sid(3))
    post(callback(sid(3), "failed", ErrorCode="30034"), msg=msg)
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.QUEUED and msg.reason_code == "provider_hold"
    hold = ProviderHold.objects.get()
    assert (hold.scope, hold.scope_value) == ("sender", msg.from_number)


def test_undelivered_uses_the_carrier_done_date_and_canceled_fails(cfg, tenant):
    msg = sent_message(tenant, sid(4))
    done = (timezone.now() - timedelta(minutes=3)).replace(second=0, microsecond=0)
    post(
        callback(sid(4), "undelivered", ErrorCode="30003", RawDlrDoneDate=done.strftime("%y%m%d%H%M")),
        msg=msg,
    )
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.UNDELIVERED and msg.failed_at == max(done, msg.sent_at)
    assert msg.reason_code == "provider_undelivered" and "30003" in msg.status_reason
    other = sent_message(tenant, sid(5))
    post(callback(sid(5), "canceled"), msg=other)
    drain()
    other.refresh_from_db()
    assert other.status == Status.FAILED and other.reason_code == "provider_canceled"


def test_implausible_done_date_is_ignored(cfg, tenant):
    msg = sent_message(tenant, sid(6))
    post(callback(sid(6), "delivered", RawDlrDoneDate="3001010000"), msg=msg)  # 2030: not this receipt
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.DELIVERED and msg.delivered_at == ReceiptEvent.objects.get().received_at


@pytest.mark.parametrize("status", ["queued", "accepted", "sending", "receiving"])
def test_informational_statuses_only_note(cfg, tenant, status):
    msg = sent_message(tenant, sid(7))
    post(callback(sid(7), status), msg=msg)
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.SENT
    assert msg.events.filter(kind="receipt", details__provider_status=status).count() == 1


def test_shared_key_signature_is_accepted_and_a_wrong_one_refused(cfg, tenant):
    msg = sent_message(tenant, sid(8))
    assert post(callback(sid(8), "delivered"), msg=msg, shared_key=True).status_code == 201
    wrong = Client().post(
        "/receipts/twilio/",
        callback(sid(8), "delivered"),
        HTTP_X_TWILIO_SIGNATURE="AAAA",
        HTTP_X_TWILIO_WEBHOOKS_SIGNATURE_SETTINGS="key=wk1,algorithm=HMAC_SHA256",
    )
    assert wrong.status_code == 403
    assert Client().post("/receipts/carrier-pigeon/", {}).status_code == 404
    assert ReceiptEvent.objects.count() == 1


def test_receipt_for_an_uncertain_attempt_records_the_submission_as_sent(cfg, tenant):
    msg = sending_message(tenant, attempt_outcome=AttemptOutcome.UNCERTAIN)
    post(callback(sid(9), "sent"), msg=msg)
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.SENT and msg.provider_message_id == sid(9)
    found = msg.events.get(kind="reconciled_found")
    assert "receipt" in found.details["source"]
    assert Attempt.objects.get(message=msg).outcome == AttemptOutcome.RECONCILED_FOUND


def test_receipt_while_the_submit_response_is_pending_waits(cfg, tenant):
    msg = sending_message(tenant)  # attempt still pending: the answer will bring the sid
    post(callback(sid(10), "sent"), msg=msg)
    drain()
    receipt = ReceiptEvent.objects.get()
    assert receipt.processed_at is None and receipt.message_id == msg.pk
    msg.refresh_from_db()
    assert msg.status == Status.SENDING


def test_receipt_after_absent_verdict_calls_off_the_queued_resend(cfg, tenant):
    msg = sending_message(tenant, attempt_outcome=AttemptOutcome.RECONCILED_ABSENT)
    transitions.transition(
        msg.pk, from_statuses=[Status.SENDING], to_status=Status.QUEUED, kind="reconciled_absent"
    )
    post(callback(sid(11), "sent"), msg=msg)
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.SENT and msg.provider_message_id == sid(11)
    assert "called off" in msg.events.get(kind="reconciled_found").details["decision"]


def test_receipt_for_a_second_submission_is_a_visible_duplicate(cfg, tenant, caplog):
    msg = sent_message(tenant, sid(12))
    Attempt.objects.create(
        message=msg,
        number=2,
        provider="twilio",
        idempotency_token="t2",
        started_at=timezone.now(),
        outcome=AttemptOutcome.RECONCILED_ABSENT,
    )
    post(callback(sid(13), "sent"), msg=msg, attempt=2)
    post(callback(sid(13), "delivered"), msg=msg, attempt=2)
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.SENT and msg.provider_message_id == sid(12), "the recorded copy stays"
    dup = DuplicateSubmission.objects.get()
    assert (dup.message_id, dup.provider_message_id, dup.attempt_number) == (msg.pk, sid(13), 2)
    assert msg.events.filter(kind="duplicate_submission").count() == 1
    outcomes = sorted(ReceiptEvent.objects.values_list("outcome", flat=True))
    assert outcomes == [ReceiptOutcome.DUPLICATE, ReceiptOutcome.DUPLICATE]
    assert any("duplicate submission" in r.message for r in caplog.records)


def test_receipt_without_a_hint_for_an_unknown_sid_waits_then_orphans(cfg, tenant, settings):
    settings.RECEIPT_PENDING_MAX_AGE_SECONDS = 60
    post(callback(sid(14), "delivered"))
    ReceiptEvent.objects.update(received_at=datetime.now(UTC) - timedelta(seconds=61))
    drain()
    assert ReceiptEvent.objects.get().outcome == ReceiptOutcome.ORPHANED
