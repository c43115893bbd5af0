"""Benchmark scenarios for recurring schedules (the recurring-schedules issue), run through
``python -m bench``: materializer throughput with many active schedules, the materializer's cost when
nothing is due, and the occurrence preview. Like every scenario they print figures, assert nothing,
and need PostgreSQL (they empty the message and schedule tables)."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from bench.harness import devprocs
from bench.harness.data import bench_reset
from scheduling.models import Message, Schedule
from scheduling.schedules.materialize import schedules_materialize, stored
from scheduling.schedules.recurrence import recurrence_build
from smsgw.models import Tenant, api_key_create

# The sender pool's column, from the model: its name and the field's differ for a release.
_POOL = Schedule._meta.get_field("sender_pool").column


@dataclass(frozen=True)
class RuleMix:
    rrule: str
    tz_name: str
    share: float


# Rules a tenant actually uses, each firing 1-4 times in a 24 h horizon (2.5 on average).
MIX = (
    RuleMix("FREQ=DAILY", "Europe/Berlin", 0.25),
    RuleMix("FREQ=HOURLY;INTERVAL=12", "America/New_York", 0.25),
    RuleMix("FREQ=HOURLY;INTERVAL=8", "Asia/Kolkata", 0.25),
    RuleMix("FREQ=HOURLY;INTERVAL=6", "Australia/Sydney", 0.25),
)


def _say(msg: str) -> None:
    print(msg, flush=True)


def schedules_reset() -> Tenant:
    tenant = bench_reset()
    with connection.cursor() as cur:
        cur.execute("TRUNCATE scheduling_scheduleversion, scheduling_schedule CASCADE")
    return tenant


def schedules_load(
    tenant: Tenant, n: int, *, rrule: str, tz_name: str, start_local: datetime, due: bool = True
) -> int:
    """Insert ``n`` active schedules sharing one definition in one statement (PostgreSQL), with the
    cursor where the API would put it: the first occurrence after now. ``due=False`` moves the cursor
    a week ahead (active, nothing to make yet). Returns how many occurrences each will make in the
    first run (informational)."""
    now = timezone.now()
    rec = recurrence_build(
        rrule=rrule, start=start_local, tz_name=tz_name, dst_policy=None, now=now, max_per_day=10_000
    )
    first = rec.first_after(now if due else now + timedelta(days=7))
    horizon_end = now + timedelta(seconds=settings.SCHEDULE_HORIZON_SECONDS)
    per_schedule = sum(1 for _ in zip(range(500), _until(rec.after(now), horizon_end), strict=False))
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO scheduling_schedule (public_id, tenant_id, status, version, "to", from_number,
                __POOL__, body, encoding, segments, priority, metadata, validity_seconds,
                rrule, exdate, start_local, timezone, dst_policy, count_last_local, quiet_hours,
                recipient_timezone, cursor_local, next_occurrence_at, materialized_until,
                materialized_count, request_fingerprint, created_at, updated_at)
            SELECT 'sch_' || substr(md5(random()::text || g::text), 1, 24), %s, 'active', 1,
                   '+1415' || lpad((2000000 + g)::text, 7, '0'), '+14155550100', '', 'Bench reminder ' || g,
                   'GSM-7', 1, 'bulk', '{}', 86400, %s, '[]', %s, %s, 'earlier', NULL, '{}', '', %s, %s,
                   NULL, 0, '', now(), now()
            FROM generate_series(1, %s) AS g
            """.replace("__POOL__", _POOL),
            [tenant.pk, rec.text, stored(rec.start), tz_name, stored(first.local), first.due_at, n],
        )
        cur.execute(
            """
            INSERT INTO scheduling_scheduleversion (schedule_id, number, change, status, changed_fields,
                definition, actor, created_at)
            SELECT id, 1, 'created', 'active', '[]', %s, 'bench', now() FROM scheduling_schedule
            WHERE tenant_id = %s AND rrule = %s AND timezone = %s
            """,
            [json.dumps({"rrule": rec.text, "timezone": tz_name}), tenant.pk, rec.text, tz_name],
        )
    return per_schedule


def _until(occurrences, horizon_end):
    for occ in occurrences:
        if occ.due_at > horizon_end:
            return
        yield occ


def _load_mix(tenant: Tenant, n: int, *, due: bool) -> dict:
    expected = 0
    soon = (timezone.now() + timedelta(minutes=5)).replace(second=0, microsecond=0)
    for mix in MIX:
        count = int(n * mix.share)
        start = soon.astimezone(_zone(mix.tz_name)).replace(tzinfo=None)
        each = schedules_load(tenant, count, rrule=mix.rrule, tz_name=mix.tz_name, start_local=start, due=due)
        expected += count * each
    with connection.cursor() as cur:
        cur.execute("ANALYZE scheduling_schedule")
        cur.execute("ANALYZE scheduling_message")
    return {"schedules": Schedule.objects.filter(tenant=tenant).count(), "expected_occurrences": expected}


def _zone(name: str):
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


def materialize(*, n: int, processes: int, batch_size: int | None) -> dict:
    """Throughput: ``n`` active schedules, all due, materialized until none is left."""
    tenant = schedules_reset()
    loaded = _load_mix(tenant, n, due=True)
    _say(f"materialize: {loaded['schedules']} schedules, {loaded['expected_occurrences']} occurrences due")
    started = time.perf_counter()
    batches: list[float] = []
    if processes <= 1:
        while True:
            report = schedules_materialize(limit=batch_size)
            if not report.schedules:
                break
            batches.append(report.seconds * 1000)
    else:
        argv = [sys.executable, "manage.py", "materialize"]
        if batch_size:
            argv += ["--batch-size", str(batch_size)]
        procs = [devprocs.Proc(f"materialize{i}", argv, dict(os.environ)) for i in range(processes)]
        for proc in procs:
            proc.popen.wait(3600)
            proc.stop()
    elapsed = time.perf_counter() - started
    made = Message.objects.filter(tenant=tenant).count()
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) - count(DISTINCT occurrence_key) FROM scheduling_message WHERE tenant_id = %s",
            [tenant.pk],
        )
        duplicates = cur.fetchone()[0]
    return {
        "scenario": "materialize",
        "schedules": loaded["schedules"],
        "occurrences": made,
        "expected_occurrences": loaded["expected_occurrences"],
        "duplicate_keys": duplicates,
        "processes": processes,
        "batch_size": batch_size or settings.MATERIALIZE_BATCH_SIZE,
        "seconds": round(elapsed, 2),
        "occurrences_per_s": round(made / elapsed, 1),
        "schedules_per_s": round(loaded["schedules"] / elapsed, 1),
        **(
            {
                "batches": len(batches),
                "batch_ms_p50": round(statistics.median(batches), 1),
                "batch_ms_max": round(max(batches), 1),
            }
            if batches
            else {}
        ),
    }


def materialize_idle(*, n: int, repeats: int) -> dict:
    """The cost of a run when nothing is due, with ``n`` active schedules (and with none)."""
    tenant = schedules_reset()

    def runs() -> list[float]:
        schedules_materialize()  # warm connection and caches
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            report = schedules_materialize()
            times.append((time.perf_counter() - started) * 1000)
            assert report.schedules == 0
        return sorted(times)

    empty = runs()
    loaded = _load_mix(tenant, n, due=False)
    full = runs()
    with connection.cursor() as cur:
        horizon_end = timezone.now() + timedelta(seconds=settings.SCHEDULE_HORIZON_SECONDS)
        cur.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT id FROM scheduling_schedule WHERE status = 'active' "
            "AND next_occurrence_at <= %s ORDER BY next_occurrence_at LIMIT 500 FOR UPDATE SKIP LOCKED",
            [horizon_end],
        )
        plan = cur.fetchone()[0][0]
    return {
        "scenario": "materialize-idle",
        "active_schedules": loaded["schedules"],
        "repeats": repeats,
        "run_ms_p50": round(statistics.median(full), 3),
        "run_ms_p99": round(full[int(len(full) * 0.99) - 1], 3),
        "run_ms_max": round(full[-1], 3),
        "with_no_schedules_run_ms_p50": round(statistics.median(empty), 3),
        "claim_plan": _plan_nodes(plan["Plan"]),
    }


def _plan_nodes(node: dict) -> list[str]:
    out = [f"{node['Node Type']}" + (f" on {node['Index Name']}" if "Index Name" in node else "")]
    for child in node.get("Plans", []):
        out += _plan_nodes(child)
    return out


PREVIEW_RULES = (
    ("FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR", "Europe/Berlin", "2026-12-01T08:30:00"),
    ("FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1", "America/New_York", "2026-12-01T17:00:00"),
    ("FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29", "Australia/Sydney", "2027-01-01T09:00:00"),
    ("FREQ=HOURLY;BYHOUR=9,10,11,12,13,14,15,16,17", "Australia/Lord_Howe", "2016-01-04T09:00:00"),
    ("FREQ=DAILY;BYHOUR=8,20", "Asia/Kolkata", "2016-01-01T08:00:00"),
)


def preview(*, count: int, repeats: int) -> dict:
    """GET /v1/schedules/{id}/occurrences?count=N through the DRF stack (in process, no network)."""
    from rest_framework.test import APIClient

    tenant = schedules_reset()
    _, key = api_key_create(tenant=tenant, name="bench-preview")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    results = []
    for rrule, tz_name, start in PREVIEW_RULES:
        resp = client.post(
            "/v1/schedules",
            {"to": "+14155550123", "body": "preview", "rrule": rrule, "start": start, "timezone": tz_name},
            format="json",
        )
        assert resp.status_code == 201, resp.content
        url = f"/v1/schedules/{resp.json()['id']}/occurrences?count={count}"
        client.get(url)
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            got = client.get(url)
            times.append((time.perf_counter() - started) * 1000)
        times.sort()
        results.append(
            {
                "rrule": rrule,
                "timezone": tz_name,
                "start": start,
                "occurrences": len(got.json()["occurrences"]),
                "ms_p50": round(statistics.median(times), 2),
                "ms_p99": round(times[max(0, int(len(times) * 0.99) - 1)], 2),
                "ms_max": round(times[-1], 2),
            }
        )
    return {"scenario": "preview", "count": count, "repeats": repeats, "rules": results}


__all__ = ["materialize", "materialize_idle", "preview", "schedules_load", "schedules_reset"]
