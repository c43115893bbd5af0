"""More than one receipt process at once (PostgreSQL): each claims its batch with FOR UPDATE SKIP LOCKED,
so a second processor takes the receipts the first does not hold, without waiting for it, and no receipt
is applied twice or lost."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction
from django.utils import timezone

from receipts import processor
from receipts.models import ReceiptEvent, ReceiptOutcome
from scheduling.models import MessageEvent, Status
from tests.factories import tenant_with_key
from tests.receipts.test_receipts import callback, cfg, sent_message, signed_post  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_second_processor_takes_what_the_first_does_not_hold_and_nothing_twice(cfg):  # noqa: F811
    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL")
    tenant = tenant_with_key("acme")[0]
    msgs = [sent_message(tenant, f"SM{i:032x}") for i in range(20)]
    for msg in msgs:
        assert signed_post(callback(msg.provider_message_id, "delivered")).status_code == 201
    ReceiptEvent.objects.update(next_try_at=timezone.now())
    holding, finish = threading.Event(), threading.Event()
    held: list[int] = []
    errors: list[BaseException] = []

    def first() -> None:  # claims 10 and holds them until told to finish
        try:
            now = timezone.now()
            with transaction.atomic():
                receipts = processor._claim(now, 10)
                held.extend(r.pk for r in receipts)
                holding.set()
                assert finish.wait(30)
                processor._apply(receipts, now)
        except BaseException as exc:
            errors.append(exc)
            holding.set()
        finally:
            connection.close()

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert holding.wait(30) and not errors and len(held) == 10
        # The second processor does not wait for the first's locks: it takes the other ten at once.
        assert processor.receipts_process_due(limit=100) == 10
        left = ReceiptEvent.objects.filter(processed_at__isnull=True)
        assert sorted(left.values_list("id", flat=True)) == sorted(held)
        assert processor.receipts_process_due(limit=100) == 0, "nothing it may take is left"
    finally:
        finish.set()
        thread.join(30)
    assert not errors, errors
    receipts = list(ReceiptEvent.objects.all())
    assert len(receipts) == 20
    assert all(r.processed_at is not None and r.outcome == ReceiptOutcome.APPLIED for r in receipts)
    for msg in msgs:
        msg.refresh_from_db()
        assert msg.status == Status.DELIVERED
        assert MessageEvent.objects.filter(message=msg, kind="delivered").count() == 1, msg.pk
