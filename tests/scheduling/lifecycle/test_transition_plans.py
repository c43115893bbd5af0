"""What a batch compare-and-set reads on PostgreSQL: each row it names is found by one primary-key probe,
whatever the statistics say, not by a walk of every row in the source status.

`bench soak` caught the receipt batch's `sent` -> `delivered` move, planned on statistics from before the
sends, as PostgreSQL's top statement: it read the partial `sent` index end to end and hash-joined it to
the batch (23.6 ms for 100 rows with some 36,000 messages sent, growing with the backlog)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from tests.factories import tenant_with_key
from tests.plans import plan_of, rows_read, sent_on_stale_statistics

pytestmark = pytest.mark.django_db

MESSAGES = 20_000
BATCH = 100


def _versioned(batch):
    return transitions.transition_versioned(
        [(mid, version, {"provider_status": "delivered"}) for mid, version in batch],
        from_status=Status.SENT,
        to_status=Status.DELIVERED,
        kind="delivered",
        per_row_columns=("provider_status",),
    )


def _many(batch):
    rows = transitions.transition_many(
        [mid for mid, _ in batch], from_status=Status.SENT, to_status=Status.DELIVERED, kind="delivered"
    )
    return [row["id"] for row in rows]


@pytest.mark.parametrize("move", [_versioned, _many], ids=["transition_versioned", "transition_many"])
def test_a_batch_move_reads_only_its_own_rows_on_stale_statistics(move):
    if connection.vendor != "postgresql":
        pytest.skip("the plan is PostgreSQL's")
    sent_on_stale_statistics(tenant_with_key("acme")[0], MESSAGES)
    table = Message._meta.db_table
    batch = list(Message.objects.order_by("?").values_list("id", "version")[:BATCH])

    with CaptureQueriesContext(connection) as ctx:
        moved = move(batch)
    assert sorted(moved) == sorted(mid for mid, _ in batch)
    assert Message.objects.filter(status=Status.DELIVERED).count() == BATCH
    assert Message.objects.filter(status=Status.SENT).count() == MESSAGES - BATCH
    updates = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith(f'UPDATE "{table}"')]
    assert len(updates) == 1, ctx.captured_queries
    # The rows have moved; the same statement's plan still shows how it finds them (each probe now
    # finds its row `delivered` and drops it). The walk read every `sent` row: 19,900.
    plan = plan_of(updates[0])
    assert 0 < rows_read(plan, table) <= BATCH, plan
