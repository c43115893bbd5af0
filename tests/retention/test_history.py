"""Finished messages move to history after HISTORY_AFTER_HOURS, with their timeline, attempts and receipt
evidence, and leave the operational tables; nothing pending moves; history goes at its purge day (a
partition dropped on PostgreSQL, a DELETE on SQLite). Both halves run these (clock control: ``now``)."""

from __future__ import annotations

from datetime import UTC, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from delivery.models import Attempt
from receipts.models import ReceiptEvent, WebhookDelivery
from retention import partitions
from retention.history import history_move_batch
from retention.jobs import retention_run
from retention.models import MessageHistory, RetentionAudit, TenantRetention
from retention.prune import history_prune
from scheduling.dispatch.sweep import sweep_once
from scheduling.models import Message, MessageEvent, Status
from tests.factories import message, tenant_with_key

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

LATER = timedelta(hours=49)  # past the default HISTORY_AFTER_HOURS (48)


def _final(tenant, status=Status.DELIVERED, **kwargs):
    msg = message(tenant, status=status, **kwargs)
    now = timezone.now()
    stamp = {Status.DELIVERED: "delivered_at", Status.FAILED: "failed_at", Status.CANCELLED: "cancelled_at"}
    Message.objects.filter(pk=msg.pk).update(run_after=None, sent_at=now, **{stamp[status]: now})
    Attempt.objects.create(
        message=msg, number=1, provider="twilio", idempotency_token="t", started_at=now, outcome="accepted"
    )
    return msg


def _place(ids):
    """Where each message is: 'live', 'history', 'both' or 'gone'."""
    live = set(Message.objects.filter(id__in=ids).values_list("id", flat=True))
    hist = set(MessageHistory.objects.filter(id__in=ids).values_list("id", flat=True))
    return {
        i: {(True, False): "live", (False, True): "history", (True, True): "both"}.get(
            (i in live, i in hist), "gone"
        )
        for i in ids
    }


def test_finished_messages_move_with_their_whole_record_and_pending_ones_stay():
    tenant, _ = tenant_with_key()
    delivered = _final(tenant, body="your code is 1234")
    cancelled = _final(tenant, Status.CANCELLED)
    scheduled = message(tenant, due_in=365 * 86400)  # a year ahead: never touched
    sending = message(tenant, status=Status.SENDING)
    waiting_hook = _final(tenant, Status.FAILED)
    WebhookDelivery.objects.create(
        webhook_id="wh1",
        tenant=tenant,
        message=waiting_hook,
        event_type="message.failed",
        payload={},
        next_attempt_at=timezone.now(),
        created_at=timezone.now(),
    )
    ReceiptEvent.objects.create(
        provider="twilio",
        provider_message_id="SM1",
        raw_status="delivered",
        dedupe_key="k1",
        received_at=timezone.now(),
        next_try_at=timezone.now(),
        processed_at=timezone.now(),
        outcome="applied",
        message=delivered,
    )
    ids = [delivered.pk, cancelled.pk, scheduled.pk, sending.pk, waiting_hook.pk]

    assert history_move_batch(now=timezone.now() + timedelta(hours=47)) == {}  # not yet
    done = history_move_batch(now=timezone.now() + LATER)

    assert done["messages_moved"] == 2
    assert _place(ids) == {
        delivered.pk: "history",
        cancelled.pk: "history",
        scheduled.pk: "live",
        sending.pk: "live",
        waiting_hook.pk: "live",
    }
    assert not MessageEvent.objects.filter(message_id__in=[delivered.pk, cancelled.pk]).exists()
    assert not Attempt.objects.filter(message_id__in=[delivered.pk, cancelled.pk]).exists()
    assert not ReceiptEvent.objects.filter(dedupe_key="k1").exists()
    row = MessageHistory.objects.get(id=delivered.pk)
    assert (row.public_id, row.tenant_id, row.to, row.status) == (
        delivered.public_id,
        tenant.pk,
        delivered.to,
        "delivered",
    )
    assert row.document["message"]["body"] == "your code is 1234"
    assert [e["kind"] for e in row.document["events"]] == ["created"]
    assert [a["outcome"] for a in row.document["attempts"]] == ["accepted"]
    assert [r["raw_status"] for r in row.document["receipts"]] == ["delivered"]
    day = row.finished_at.astimezone(UTC).date()
    assert row.purge_on == day + timedelta(days=365 + 1)
    assert row.redact_on == day + timedelta(days=30 + 1)


def test_a_tenants_own_horizons_set_its_purge_and_redaction_days():
    tenant, _ = tenant_with_key()
    TenantRetention.objects.create(tenant=tenant, content_days=3, record_days=10)
    msg = _final(tenant)
    history_move_batch(now=timezone.now() + LATER)
    row = MessageHistory.objects.get(id=msg.pk)
    day = row.finished_at.astimezone(UTC).date()
    assert (row.redact_on, row.purge_on) == (day + timedelta(days=4), day + timedelta(days=11))


def test_history_goes_at_its_purge_day_and_not_before():
    tenant, _ = tenant_with_key()
    TenantRetention.objects.create(tenant=tenant, record_days=5)
    short = _final(tenant)
    other, _ = tenant_with_key("other")
    long = _final(other)  # the default: 365 days
    history_move_batch(now=timezone.now() + LATER)
    assert history_prune(now=timezone.now() + timedelta(days=4)) == {}
    done = history_prune(now=timezone.now() + timedelta(days=6, hours=23))
    assert done
    assert _place([short.pk, long.pk]) == {short.pk: "gone", long.pk: "history"}
    if partitions.partitioned():
        assert done["history_partitions_dropped"] == 1
        left = partitions.partitions_existing()
        assert MessageHistory.objects.get(id=long.pk).purge_on in left
        assert all(day > (timezone.now() + timedelta(days=6, hours=23)).date() for day in left)


def test_the_job_moves_and_prunes_in_batches_and_audits_counts_only():
    tenant, _ = tenant_with_key()
    ids = [_final(tenant, to=f"+1415555{i:04d}").pk for i in range(7)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("django.conf.settings.RETENTION_BATCH_SIZE", 3)
        totals = retention_run(now=timezone.now() + LATER)
    assert totals["history_move"]["messages_moved"] == 7
    assert set(_place(ids).values()) == {"history"}
    audit = RetentionAudit.objects.get(action="history_move")
    assert audit.counts["messages_moved"] == 7
    assert "+1415555" not in str(audit.counts) and audit.subject == ""
    assert retention_run(now=timezone.now() + LATER) == {}  # nothing left: no audit row either
    assert RetentionAudit.objects.count() == 1


def test_the_sweep_never_reads_history():
    tenant, _ = tenant_with_key()
    _final(tenant)
    history_move_batch(now=timezone.now() + LATER)
    message(tenant)  # one due message, so the pass claims and releases
    with CaptureQueriesContext(connection) as ctx:
        sweep_once()
    sql = " ".join(q["sql"] for q in ctx.captured_queries)
    assert "messagehistory" not in sql.lower()
    assert 'FROM "scheduling_message"' in sql  # the pass did read the live table
