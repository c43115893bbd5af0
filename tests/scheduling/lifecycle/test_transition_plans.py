"""What a batch compare-and-set reads on PostgreSQL: each row it names is found by one primary-key probe,
whatever the statistics say, not by a walk of every row in the source status.

`bench soak` caught the receipt batch's `sent` -> `delivered` move, planned on statistics from before the
sends, as PostgreSQL's top statement: it read the partial `sent` index end to end and hash-joined it to
the batch (23.6 ms for 100 rows with some 36,000 messages sent, growing with the backlog)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from tests.factories import messages_bulk, tenant_with_key

pytestmark = pytest.mark.django_db

MESSAGES = 20_000
BATCH = 100


def _scans(plan: dict, table: str) -> list[dict]:
    """Every node of the plan that reads ``table``."""
    found = [plan] if plan.get("Relation Name") == table else []
    for child in plan.get("Plans", []):
        found += _scans(child, table)
    return found


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
    tenant = tenant_with_key("acme")[0]
    messages_bulk(tenant, MESSAGES, due_at=timezone.now())
    table = Message._meta.db_table
    with connection.cursor() as cur:
        # Statistics from before the sends, as `bench soak` had them (and any table between two
        # ANALYZEs): no message is `sent` yet.
        cur.execute(f'ANALYZE "{table}"')
        cur.execute(f"UPDATE \"{table}\" SET status = 'sent', sent_at = now(), provider = 'twilio'")
    batch = list(Message.objects.order_by("?").values_list("id", "version")[:BATCH])

    with CaptureQueriesContext(connection) as ctx:
        moved = move(batch)
    assert sorted(moved) == sorted(mid for mid, _ in batch)
    assert Message.objects.filter(status=Status.DELIVERED).count() == BATCH
    updates = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith(f'UPDATE "{table}"')]
    assert len(updates) == 1, ctx.captured_queries
    # The rows have moved; the same statement's plan still shows how it finds them (now none match).
    with connection.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + updates[0])
        plan = cur.fetchone()[0][0]["Plan"]
    reads = _scans(plan, table)
    assert reads, plan
    # One probe per named row returns at most that row; the walk returned every `sent` row (19,900).
    assert sum(node["Actual Rows"] * node["Actual Loops"] for node in reads) <= BATCH, plan
