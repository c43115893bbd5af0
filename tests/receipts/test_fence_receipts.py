"""Status callbacks of the history a restore lost (receipts.unknown, docs/restore.md): the fence's attempt
has the number the first submission after the backup used, so a signed callback naming it records the
fenced message sent under its sid at once, without waiting for the listing; a callback naming an attempt
the restored database never saw moves nothing (the listing settles that message); one naming a message the
restored database does not have waits, then is recorded orphaned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from delivery.models import AttemptOutcome
from delivery.sending import fence
from receipts.models import ReceiptEvent, ReceiptOutcome
from scheduling.models import Message, Status
from tests.factories import message, recipient, tenant_with_key
from tests.receipts.test_receipt_effects import callback, cfg, drain, post, sid

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

__all__ = ["cfg"]  # the fixture, used by name


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


def fenced(tenant, i: int) -> Message:
    msg = message(tenant, to=recipient(i), due_in=-60)
    Message.objects.filter(pk=msg.pk).update(provider="twilio")
    fence.messages_fence(since=timezone.now() - timedelta(minutes=5), actor="operator:test")
    msg.refresh_from_db()
    assert msg.status == Status.SENDING and msg.attempts.get().number == 1
    return msg


def test_a_callback_naming_the_fences_attempt_records_the_message_sent_under_its_sid(cfg, tenant):
    msg = fenced(tenant, 1)
    assert post(callback(sid(1), "delivered"), msg=msg, attempt=1).status_code == 201
    drain()
    msg.refresh_from_db()
    assert msg.status in (Status.SENT, Status.DELIVERED) and msg.provider_message_id == sid(1)
    assert msg.events.get(kind="reconciled_found").details["provider_message_id"] == sid(1)
    assert msg.attempts.get().outcome == AttemptOutcome.RECONCILED_FOUND


def test_a_callback_naming_an_attempt_the_restore_never_saw_moves_nothing(cfg, tenant):
    msg = fenced(tenant, 2)
    post(callback(sid(2), "delivered"), msg=msg, attempt=2)
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.SENDING and not msg.provider_message_id
    assert msg.attempts.get().outcome == AttemptOutcome.UNCERTAIN


def test_a_callback_for_a_message_accepted_after_the_backup_waits_then_is_orphaned(cfg, tenant, settings):
    settings.RECEIPT_PENDING_MAX_AGE_SECONDS = 60
    lost = message(tenant, to=recipient(3))
    post(callback(sid(3), "delivered"), msg=lost)
    Message.objects.filter(pk=lost.pk).delete()  # the restored database never had it
    drain()
    receipt = ReceiptEvent.objects.get()
    assert receipt.processed_at is None
    ReceiptEvent.objects.update(received_at=datetime.now(UTC) - timedelta(seconds=61))
    drain()
    assert ReceiptEvent.objects.get().outcome == ReceiptOutcome.ORPHANED
