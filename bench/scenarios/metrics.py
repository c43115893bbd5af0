"""``python -m bench metrics``: the cost of one /metrics scrape with a large table. Loads N pending
messages (most scheduled for tomorrow, a due backlog, some queued, sending and sent) plus terminal ones,
VACUUM ANALYZEs as autovacuum would, then times full scrapes (the state collector's queries and the
multiprocess event files, rendered to text). Like every scenario it prints figures, asserts nothing and
needs PostgreSQL (it empties the message tables)."""

from __future__ import annotations

import os
import statistics
import time
from datetime import timedelta

from django.db import connection
from django.utils import timezone
from prometheus_client import generate_latest

from bench.harness.data import bench_reset, messages_load
from bench.harness.figures import say
from reporting.views import registry_build

CHUNK = 250_000


def scrape_cost(*, n: int, terminal: int, repeats: int) -> dict:
    tenant = bench_reset()
    now = timezone.now()
    due = max(1, n // 20)  # 5 % already due: a backlog the sweep has not drained
    plan = [  # (count, first due, spread, priority)
        (due // 2, now - timedelta(minutes=10), 300.0, "transactional"),
        (due - due // 2, now - timedelta(minutes=30), 600.0, "bulk"),
        ((n - due) // 2, now + timedelta(days=1), 86400.0, "transactional"),
        (n - due - (n - due) // 2, now + timedelta(days=1), 86400.0, "bulk"),
        (terminal, now - timedelta(days=1), 3600.0, "bulk"),
    ]
    offset = 0
    for count, first, spread, priority in plan:
        for start in range(0, count, CHUNK):
            size = min(CHUNK, count - start)
            messages_load(
                tenant,
                size,
                first_due=first + timedelta(seconds=spread * start / max(count, 1)),
                spread_seconds=spread * size / max(count, 1),
                offset=offset,
                priority=priority,
            )
            offset += size
    pending_end = n
    with connection.cursor() as cur:
        # In-flight and sent shares of the pending set, and the terminal rows delivered: status moves
        # as the transitions would make them (ids in load order).
        cur.execute("SELECT min(id) FROM scheduling_message")
        first_id = cur.fetchone()[0]
        moves = [
            ("queued", first_id, first_id + n // 50),
            ("sending", first_id + n // 50, first_id + n // 50 + n // 1000),
            ("sent", first_id + n // 25, first_id + n // 25 + n // 50),
            ("delivered", first_id + pending_end, first_id + pending_end + terminal),
        ]
        for status, lo, hi in moves:
            cur.execute(
                "UPDATE scheduling_message SET status = %s, run_after = CASE WHEN %s = 'delivered' THEN NULL "
                "ELSE run_after END, sent_at = CASE WHEN %s IN ('sent', 'delivered') THEN now() END "
                "WHERE id >= %s AND id < %s",
                [status, status, status, lo, hi],
            )
        cur.execute("VACUUM ANALYZE scheduling_message")  # what autovacuum does after a bulk load
        cur.execute("SELECT status, count(*) FROM scheduling_message GROUP BY status ORDER BY status")
        truth = dict(cur.fetchall())
    say(f"metrics: {sum(truth.values())} messages {truth}")
    generate_latest(registry_build())  # warm the connection and the plan caches
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        text = generate_latest(registry_build())
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    scraped = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.decode().splitlines()
        if line.startswith(("smsgw_messages", "smsgw_due_"))
    }
    files = len(os.listdir(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
    return {
        "scenario": "metrics",
        "messages_by_status": truth,
        "pending": sum(v for k, v in truth.items() if k in ("scheduled", "queued", "sending", "sent")),
        "scraped": scraped,
        "multiprocess_files": files,
        "scrape_ms_p50": statistics.median(times),
        "scrape_ms_p95": times[max(0, int(len(times) * 0.95) - 1)],
        "scrape_ms_max": times[-1],
        "repeats": repeats,
    }
