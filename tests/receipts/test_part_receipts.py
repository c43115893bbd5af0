"""A long message through a provider that answers one id per part (Vonage: ``capabilities.per_part_ids``):
its parts' receipts belong to it (not a second submission), it is delivered once every part is, and a
part that fails ends it without a resend (receipts.processor, receipts.unknown)."""

from __future__ import annotations

from django.utils import timezone

from delivery.models import Attempt, AttemptOutcome, DuplicateSubmission
from delivery.providers.vonage import callbacks as vonage_callbacks
from receipts.ingest import receipt_ingest
from receipts.models import ReceiptEvent, ReceiptOutcome
from receipts.processor import receipts_process_due
from scheduling.lifecycle import transitions
from scheduling.models import Message, MessageEvent, Status
from tests.factories import message, tenant_with_key

PARTS = ["0A00000000000001", "0A00000000000002", "0A00000000000003"]


def long_sent(db) -> Message:
    tenant, _ = tenant_with_key("acme")
    msg = message(tenant, body="x" * 400)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    transitions.transition(
        msg.pk,
        from_statuses=[Status.QUEUED],
        to_status=Status.SENT,
        kind="sent",
        set_fields={
            "provider": "vonage",
            "provider_message_id": PARTS[0],
            "attempt_count": 1,
            "provider_calls": 1,
            "sent_at": timezone.now(),
        },
    )
    Attempt.objects.create(
        message=msg,
        number=1,
        provider="vonage",
        idempotency_token="t1",
        started_at=timezone.now(),
        outcome=AttemptOutcome.ACCEPTED,
        provider_message_id=PARTS[0],
        response={"part_ids": PARTS},
    )
    msg.refresh_from_db()
    return msg


def receipt(msg: Message, part: int, status: str = "delivered", err_code: str = "0") -> None:
    ref = msg.public_id.removeprefix("msg_")
    params = {"messageId": PARTS[part - 1], "status": status, "err-code": err_code, "client-ref": f"{ref}.1"}
    receipt_ingest(provider="vonage", callback=vonage_callbacks.parse(params, {"m": ref, "a": "1"}))


def drain() -> None:
    for _ in range(5):
        ReceiptEvent.objects.filter(processed_at__isnull=True).update(next_try_at=timezone.now())
        if not receipts_process_due():
            return


def test_delivered_only_once_every_part_is_each_part_on_the_timeline(db):
    msg = long_sent(db)
    for part in (2, 1):
        receipt(msg, part)
        drain()
        msg.refresh_from_db()
        assert msg.status == Status.SENT
    receipt(msg, 3)
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.DELIVERED and msg.delivered_at is not None
    entries = MessageEvent.objects.filter(message=msg, details__receipt_id__isnull=False).order_by("id")
    assert [(e.kind, e.details["part"], e.details["parts"]) for e in entries] == [
        ("receipt", 2, 3),
        ("receipt", 1, 3),
        ("delivered", 3, 3),
    ]
    assert "every part" in entries[0].details["note"]
    assert set(ReceiptEvent.objects.values_list("message_id", flat=True)) == {msg.pk}
    assert not DuplicateSubmission.objects.exists()


def test_every_part_in_one_batch_delivers_it_once(db):
    msg = long_sent(db)
    for part in (3, 1, 2):
        receipt(msg, part)
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.DELIVERED
    outcomes = sorted(ReceiptEvent.objects.values_list("outcome", flat=True))
    assert outcomes == sorted([ReceiptOutcome.APPLIED, ReceiptOutcome.RECORDED, ReceiptOutcome.RECORDED])
    assert not DuplicateSubmission.objects.exists()


def test_a_part_rejected_with_a_transient_code_fails_the_message_never_resent(db):
    """Rejected with err-code 8 (network error, transient) would send a one-part message again; the other
    parts of a long one were handed on, so it ends `failed`."""
    msg = long_sent(db)
    receipt(msg, 1)
    receipt(msg, 2, "rejected", "8")
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.FAILED and msg.error_code == "8"
    assert Attempt.objects.filter(message=msg).count() == 1
    receipt(msg, 3)  # a later delivered part changes nothing
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.FAILED
    assert not DuplicateSubmission.objects.exists()
