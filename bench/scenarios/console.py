"""``python -m bench console``: the render time of the operator console's landing page (``/admin/``,
reporting.console) with a large message table; the target is under 300 ms at 10,000,000 messages.

Loads N messages: a due backlog (5 %), scheduled ones for tomorrow (20 %), and the rest finished over
the last week, of which a share (``--hour-share``, 1 % by default) was sent in the last hour, with failures
of a few codes among them, so the minute pass has an hour of real traffic to read. VACUUM ANALYZEs as
autovacuum would, runs the minute pass (reporting.minutes) for each minute of the hour as the periodic
task would have, timing one steady pass, then times full renders of the page for a superuser (Django's
test client: the view, its queries and the template, no network). Prints figures, asserts nothing;
needs PostgreSQL (it empties the message tables).
"""

from __future__ import annotations

import statistics
import time
from datetime import timedelta

from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone

from bench.harness.data import bench_reset, messages_load
from bench.harness.figures import say
from reporting.minutes import CATCH_UP_MINUTES, HOUR_MINUTES, console_minutes_record, minute_floor
from smsgw.observability.models import ConsoleMinute

CHUNK = 250_000
CODES = ("30003", "30005", "30007", "21211")


def _load(tenant, n: int, hour_share: float, now) -> dict[str, int]:
    due = max(1, n // 20)
    future = n // 5
    recent = max(1, int(n * hour_share))
    older = max(0, n - due - future - recent)
    plan = [  # (count, first due, spread seconds)
        (due, now - timedelta(minutes=30), 1800.0),
        (future, now + timedelta(days=1), 86400.0),
        (older, now - timedelta(days=7), 6 * 86400.0),
        (recent, now - timedelta(minutes=HOUR_MINUTES), HOUR_MINUTES * 60.0 - 10),
    ]
    offset = 0
    ranges = []
    for count, first, spread in plan:
        ranges.append((offset, offset + count))
        for start in range(0, count, CHUNK):
            size = min(CHUNK, count - start)
            messages_load(
                tenant,
                size,
                first_due=first + timedelta(seconds=spread * start / max(count, 1)),
                spread_seconds=spread * size / max(count, 1),
                offset=offset,
            )
            offset += size
    with connection.cursor() as cur:
        cur.execute("SELECT min(id) FROM scheduling_message")
        first_id = cur.fetchone()[0]
        # Finished: delivered a few seconds after their due time; 2 % of them failed with a code (the
        # provider's), as the transitions would stamp them.
        for lo, hi in ranges[2:]:
            cur.execute(
                """
                UPDATE scheduling_message SET
                  status = CASE WHEN id %% 50 = 0 THEN 'failed' ELSE 'delivered' END,
                  run_after = NULL,
                  sent_at = CASE WHEN id %% 50 = 0 THEN NULL ELSE due_at + interval '1.5 seconds' END,
                  delivered_at = CASE WHEN id %% 50 = 0 THEN NULL ELSE due_at + interval '4 seconds' END,
                  failed_at = CASE WHEN id %% 50 = 0 THEN due_at + interval '1 second' END,
                  error_code = CASE WHEN id %% 50 = 0 THEN (%s::text[])[1 + (id / 50) %% 4] ELSE '' END,
                  segments = 1 + id %% 3,
                  updated_at = due_at + interval '4 seconds'
                WHERE id >= %s AND id < %s
                """,
                [list(CODES), first_id + lo, first_id + hi],
            )
        cur.execute("VACUUM ANALYZE scheduling_message")
        cur.execute("SELECT status, count(*) FROM scheduling_message GROUP BY status ORDER BY status")
        return dict(cur.fetchall())


def render_cost(*, n: int, hour_share: float, repeats: int) -> dict:
    tenant = bench_reset()
    ConsoleMinute.objects.all().delete()
    now = timezone.now()
    truth = _load(tenant, n, hour_share, now)
    say(f"console: {sum(truth.values())} messages {truth}")
    # The hour as the periodic task would have written it (each pass fills the closed minutes it has
    # not seen, CATCH_UP_MINUTES at most), then one steady pass: this minute's state and the flows of the
    # one minute that just closed. The times are the load's: a long load (10M rows) leaves the page's own
    # hour partly empty, which costs the render nothing (it reads 60 rows by key either way).
    this = minute_floor(now)
    for back in range(HOUR_MINUTES - CATCH_UP_MINUTES, -1, -CATCH_UP_MINUTES):
        console_minutes_record(now=this - timedelta(minutes=back, seconds=-30))
    started = time.perf_counter()
    console_minutes_record(now=this + timedelta(minutes=1, seconds=30))
    pass_ms = (time.perf_counter() - started) * 1000
    user, _ = User.objects.get_or_create(username="bench-console", defaults={"is_staff": True})
    user.is_staff = user.is_superuser = True
    user.save()
    client = Client()
    client.force_login(user)
    client.get("/admin/")  # warm the connection, the templates and the plan caches
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        response = client.get("/admin/")
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.status_code
    times.sort()
    return {
        "scenario": "console",
        "messages_by_status": truth,
        "minute_rows": ConsoleMinute.objects.count(),
        "minute_pass_ms": pass_ms,
        "render_ms_p50": statistics.median(times),
        "render_ms_p95": times[max(0, int(len(times) * 0.95) - 1)],
        "render_ms_max": times[-1],
        "repeats": repeats,
    }
