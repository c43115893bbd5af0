"""What the receipt processor reads on PostgreSQL: each receipt's message is found by one probe of the
(provider id, provider) index, whatever the statistics, not by a walk of the whole index per id. `bench soak` caught the walk as
the top statement on PostgreSQL's CPU (1.2 ms an id with 36,000 messages, growing with the table)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from receipts import processor
from receipts.models import ReceiptEvent
from scheduling.models import Message, Status
from tests.factories import tenant_with_key
from tests.plans import plan_of, sent_on_stale_statistics
from tests.receipts.test_receipts import callback, cfg, signed_post  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db

MESSAGES = 20_000
RECEIPTS = 50


def _blocks(plan: dict) -> int:
    """Shared buffers the statement touched (the top node counts its children's)."""
    return plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)


def test_a_batch_of_receipts_reads_its_messages_by_one_index_probe_each(cfg):  # noqa: F811
    if connection.vendor != "postgresql":
        pytest.skip("the plan is PostgreSQL's")
    sent_on_stale_statistics(tenant_with_key("acme")[0], MESSAGES)
    table = Message._meta.db_table
    named = list(Message.objects.order_by("?").values_list("provider_message_id", flat=True)[:RECEIPTS])
    for sid in named:
        assert signed_post(callback(sid, "delivered")).status_code == 201
    ReceiptEvent.objects.update(next_try_at=timezone.now())

    with CaptureQueriesContext(connection) as ctx:
        assert processor.receipts_process_due(limit=RECEIPTS * 2) == RECEIPTS
    assert Message.objects.filter(provider_message_id__in=named, status=Status.DELIVERED).count() == RECEIPTS
    loads = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith(f'SELECT "{table}"."id"')]
    loads = [sql for sql in loads if '"provider_message_id" IN' in sql]
    assert len(loads) == 1, ctx.captured_queries
    plan = plan_of(loads[0])
    # A probe is a few index pages and the row's heap page; the walk was about 150 pages an id here.
    assert _blocks(plan) <= 8 * RECEIPTS, plan
