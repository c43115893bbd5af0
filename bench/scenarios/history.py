"""``python -m bench history`` (docs/retention.md, "Measured"): does the hot path grow with history, and
what does removing a day cost?

Same run, same tenant, same live table (``--pending`` scheduled messages a day ahead): each operation
timed with history empty, then again after ``--history`` finished messages are loaded into history
(bulk, server-side ``INSERT ... SELECT generate_series`` into a year of daily partitions, not through
the API), and the ratio printed (target <= 1.10). The "without" side is measured twice: first, and
again at the end with history detached, so both sides of the ratio run with the same pages cached (a
2 GB load evicts the live table from PostgreSQL's buffers; the first "without" is printed for
reference):

- the sweep's empty pass (``sweep_once`` with nothing due);
- a 1,000-message claim (the sweep's claim statement, scheduled -> queued; put back between repeats);
- ``POST /v1/messages`` and ``GET /v1/messages/{id}`` through the real view (Django's test client, in
  process: the view, the service and their statements, without a web server's noise).

Then the record horizon: ``--day`` finished messages in one purge day's partition removed by
``history_prune`` (DETACH + DROP), against the same rows in a plain table removed by a batched DELETE
(10,000 rows a statement, as a job that must not hold long locks would), same run.
"""

from __future__ import annotations

import json
import statistics
import time
from datetime import UTC, timedelta

from django.db import connection
from django.test import Client
from django.utils import timezone

from bench.harness.data import bench_reset, messages_load
from bench.harness.figures import say
from retention import partitions
from retention.models import MessageHistory
from retention.prune import history_prune
from scheduling.dispatch.sweep import sweep_once
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from smsgw.models import api_key_create

TARGET_RATIO = 1.10
DELETE_BATCH = 10_000
DOCUMENT = {
    "message": {"body": "Your appointment is tomorrow at 09:00. Reply STOP to opt out.", "segments": 1},
    "events": [{"kind": k, "created_at": "2026-01-01T00:00:00+00:00"} for k in ("created", "queued", "sent")],
    "attempts": [{"number": 1, "outcome": "accepted", "provider": "twilio"}],
    "receipts": [{"raw_status": "delivered"}],
    "webhooks": [],
}


def _median_ms(fn, repeats: int) -> float:
    for _ in range(3):  # warm: the first calls after a bulk load read cold pages and plan anew
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def _live(tenant, pending: int, due: int) -> None:
    now = timezone.now()
    messages_load(tenant, pending, first_due=now + timedelta(days=1))
    messages_load(tenant, due, first_due=now - timedelta(seconds=1), offset=pending)
    with connection.cursor() as cur:
        cur.execute("ANALYZE scheduling_message")


def _history_load(tenant_id: int, n: int, days: int = 365) -> None:
    """``n`` finished messages spread over ``days`` purge days, straight into the partitions."""
    today = timezone.now().astimezone(UTC).date()
    first = today + timedelta(days=1)
    partitions.partitions_ensure({first + timedelta(days=d) for d in range(days)})
    doc = json.dumps(DOCUMENT)
    step = 500_000
    with connection.cursor() as cur:
        cur.execute("SELECT coalesce(max(id), 0) FROM scheduling_message")
        base = -(10**12)  # history ids below every live id, as moved messages are older
        for start in range(0, n, step):
            cur.execute(
                'INSERT INTO retention_messagehistory (id, public_id, tenant_id, "to", from_number, status, '
                "reason_code, provider, provider_message_id, idempotency_key, campaign_id, schedule_id, "
                "created_at, due_at, sent_at, finished_at, deleted, moved_at, purge_on, redact_on, document) "
                "SELECT %s + g, 'msg_h' || lpad(g::text, 19, '0'), %s, "
                "'+1415' || lpad((g %% 9000000)::text, 7, '0'), '+14155550100', 'delivered', '', 'twilio', "
                "'SM' || md5(g::text), NULL, NULL, NULL, now(), now(), now(), now(), false, now(), "
                "%s::date + (g %% %s), NULL, %s::jsonb "
                "FROM generate_series(%s, %s) g",
                [base, tenant_id, first, days, doc, start + 1, min(start + step, n)],
            )
            say(f"history: {min(start + step, n):,} of {n:,} loaded")
        cur.execute("ANALYZE retention_messagehistory")


def _measure(client: Client, tenant, due_ids: list[int], repeats: int) -> dict[str, float]:
    now = timezone.now()
    Message.objects.filter(id__in=due_ids).update(
        status=Status.SCHEDULED, run_after=now - timedelta(seconds=1)
    )

    def claim():
        transitions.claim(
            from_status=Status.SCHEDULED,
            to_status=Status.QUEUED,
            kind="bench_claim",
            where_sql='"priority" = %s AND "run_after" <= %s',
            where_params=["transactional", now],
            order_by='"run_after"',
            limit=1000,
        )

    def claim_undo():
        Message.objects.filter(tenant=tenant, status=Status.QUEUED).update(status=Status.SCHEDULED)

    claims = []
    for _ in range(repeats + 3):
        start = time.perf_counter()
        claim()
        claims.append((time.perf_counter() - start) * 1000)
        claim_undo()
    claims = claims[3:]  # the first three warm it
    Message.objects.filter(id__in=due_ids).update(run_after=now + timedelta(days=2))  # the sweep: nothing due
    sweep = _median_ms(lambda: sweep_once(limit=1000), repeats)
    posted = []
    later = (now + timedelta(days=30)).isoformat()

    def post():
        r = client.post(
            "/v1/messages",
            {"to": f"+1415{3000000 + len(posted):07d}", "body": "bench", "send_at": later},
            content_type="application/json",
        )
        assert r.status_code == 201, r.content
        posted.append(r.json()["id"])

    post_ms = _median_ms(post, repeats)
    target = posted[len(posted) // 2]
    get_ms = _median_ms(lambda: client.get(f"/v1/messages/{target}"), repeats)
    return {
        "sweep_empty_pass_ms": sweep,
        "claim_1000_ms": statistics.median(claims),
        "post_ms": post_ms,
        "get_ms": get_ms,
    }


def _prune_day(tenant_id: int, day_rows: int) -> dict[str, float]:
    """One purge day of ``day_rows`` messages: dropped as a partition vs deleted in batches."""
    doc = json.dumps(DOCUMENT)
    today = timezone.now().astimezone(UTC).date()
    day = today - timedelta(days=1)  # already due: the next prune takes it
    partitions.partitions_ensure({day})
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {partitions.partition_name(day)} "  # noqa: S608 (a name we make, not input)
            "SELECT -(2 * 10^12)::bigint - g, 'msg_d' || g, %s, '+14155550123', '', 'delivered', '', "
            "'twilio', NULL, NULL, NULL, NULL, now(), now(), now(), now(), false, now(), %s, NULL, %s::jsonb "
            "FROM generate_series(1, %s) g",
            [tenant_id, day, doc, day_rows],
        )
        cur.execute("DROP TABLE IF EXISTS bench_plain_history")
        source = partitions.partition_name(day)
        cur.execute(f"CREATE TABLE bench_plain_history AS SELECT * FROM {source}")  # noqa: S608
        cur.execute("ALTER TABLE bench_plain_history ADD PRIMARY KEY (id)")
        cur.execute("CREATE INDEX ON bench_plain_history (purge_on)")
        cur.execute("ANALYZE bench_plain_history")
    start = time.perf_counter()
    done = history_prune(now=timezone.now())
    drop_s = time.perf_counter() - start
    start = time.perf_counter()
    with connection.cursor() as cur:
        while True:
            cur.execute(
                "DELETE FROM bench_plain_history WHERE id IN (SELECT id FROM bench_plain_history "
                "WHERE purge_on <= %s LIMIT %s)",
                [day, DELETE_BATCH],
            )
            if cur.rowcount < DELETE_BATCH:
                break
    delete_s = time.perf_counter() - start
    with connection.cursor() as cur:
        cur.execute("DROP TABLE bench_plain_history")
    return {
        "day_rows": day_rows,
        "partition_drop_s": round(drop_s, 3),
        "batched_delete_s": round(delete_s, 3),
        "partitions_dropped": done.get("history_partitions_dropped", 0),
    }


def _detach_all() -> list[str]:
    names = [partitions.partition_name(day) for day in partitions.partitions_existing()]
    with connection.cursor() as cur:
        for name in names:
            cur.execute(f"ALTER TABLE {partitions.TABLE} DETACH PARTITION {name}")
    return names


def history(*, pending: int, history_rows: int, day_rows: int, repeats: int) -> dict:
    if connection.vendor != "postgresql":
        raise SystemExit("bench history measures PostgreSQL's partitions: set DATABASE_URL")
    tenant = bench_reset()
    with connection.cursor() as cur:
        cur.execute("TRUNCATE retention_messagehistory")
    for day in partitions.partitions_existing():
        partitions.partition_drop(day)
    _, key = api_key_create(tenant=tenant)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    _live(tenant, pending, 1000)
    due_ids = list(Message.objects.filter(run_after__lte=timezone.now()).values_list("id", flat=True))
    say(f"live table: {pending:,} pending + 1,000 due; measuring with history empty")
    before = _measure(client, tenant, due_ids, repeats)
    _history_load(tenant.pk, history_rows)
    say(f"history: {MessageHistory.objects.count():,} rows; measuring again")
    after = _measure(client, tenant, due_ids, repeats)
    # The same "without" again, with the same pages cached as "with" had: history detached (no scan, the
    # rows stay on disk as standalone tables), so the ratio is history's cost, not the cache's.
    detached = _detach_all()
    say(f"history detached ({len(detached)} partitions); measuring without it again")
    again = _measure(client, tenant, due_ids, repeats)
    with connection.cursor() as cur:
        for name in detached:
            cur.execute(f"DROP TABLE {name}")
    ratios = {k: round(after[k] / again[k], 3) for k in again}
    prune = _prune_day(tenant.pk, day_rows)
    return {
        "pending_live": pending,
        "history_rows": history_rows,
        "repeats": repeats,
        "without_history_first_ms": {k: round(v, 3) for k, v in before.items()},
        "with_history_ms": {k: round(v, 3) for k, v in after.items()},
        "without_history_after_detach_ms": {k: round(v, 3) for k, v in again.items()},
        "ratio_with_over_without": ratios,
        "target_ratio": TARGET_RATIO,
        "prune_one_day": prune,
        "prune_speedup": round(prune["batched_delete_s"] / max(prune["partition_drop_s"], 1e-6), 1),
    }
