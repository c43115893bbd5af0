"""PostgreSQL plans in tests: what a statement reads, on the statistics a busy table really has, and which
statements a connection has prepared."""

from __future__ import annotations

from django.db import connection
from django.utils import timezone

from scheduling.models import Message
from smsgw.models import Tenant
from tests.factories import messages_bulk


def plan_of(sql: str) -> dict:
    """The executed plan of ``sql`` (EXPLAIN ANALYZE, with buffers): its top node."""
    with connection.cursor() as cur:
        cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql)
        return cur.fetchone()[0][0]["Plan"]


def prepared_statements(like: str) -> list[str]:
    """The text of each statement prepared on this connection whose text is LIKE ``like``."""
    with connection.cursor() as cur:
        cur.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s", [like])
        return [row[0] for row in cur.fetchall()]


def rows_read(plan: dict, table: str) -> int:
    """Rows a plan's scans of ``table`` produced or dropped by a filter, over every loop."""
    own = 0
    if plan.get("Relation Name") == table:
        loops = plan.get("Actual Loops", 1)
        own = (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)) * loops
    return own + sum(rows_read(child, table) for child in plan.get("Plans", []))


def sent_on_stale_statistics(tenant: Tenant, n: int) -> None:
    """``n`` messages `sent` through Twilio, each with a provider id, on statistics from before the sends,
    as `bench soak` had them (and any table between two ANALYZEs): no message had a provider yet."""
    messages_bulk(tenant, n, due_at=timezone.now())
    table = Message._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f'ANALYZE "{table}"')
        cur.execute(
            f"UPDATE \"{table}\" SET status = 'sent', provider = 'twilio', sent_at = now(), "
            f"provider_message_id = 'SM' || md5(id::text)"
        )
