"""Recurring schedules across real processes on PostgreSQL: concurrent materializers, a materializer
killed with SIGKILL mid-run, and a pause that lands between materialization and sending (beat, sweep,
send worker and the sandbox as real processes). Each test checks every occurrence's final state."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Count
from django.utils import timezone
from rest_framework.test import APIClient

from bench.scenarios.schedules import schedules_load
from scheduling.models import Message, MessageEvent, Schedule, ScheduleStatus, Status
from tests import processes
from tests.factories import RECIPIENT, tenant_with_key
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PER_SCHEDULE = 24  # FREQ=HOURLY from a minute from now: 24 occurrences in the horizon below
# 23.5 h, not 24 h: the 25th hourly occurrence (start + 24 h) only enters a horizon measured from "now"
# half an hour later, so a slow run cannot see a legitimately new occurrence and mistake it for a copy.
HORIZON_SECONDS = 84600


@pytest.fixture(autouse=True)
def _horizon(settings):
    settings.SCHEDULE_HORIZON_SECONDS = HORIZON_SECONDS


def _load(n: int) -> tuple[int, object]:
    if connection.vendor != "postgresql":
        pytest.skip("the materializer race tests run on PostgreSQL (FOR UPDATE SKIP LOCKED)")
    tenant, _ = tenant_with_key("acme")
    start = (timezone.now() + timedelta(minutes=1)).replace(second=0, microsecond=0, tzinfo=None)
    per = schedules_load(tenant, n, rrule="FREQ=HOURLY", tz_name="UTC", start_local=start)
    assert per == PER_SCHEDULE
    first_due = Schedule.objects.filter(tenant=tenant).values_list("next_occurrence_at", flat=True).first()
    connection.close()  # the processes below must not wait on this one
    return n * PER_SCHEDULE, first_due


def _materializer(name: str, *args: str) -> processes.Proc:
    argv = [sys.executable, "manage.py", "materialize", *args]
    # Its sessions carry its name as their application_name (libpq reads PGAPPNAME): _sessions_of finds them.
    return processes.Proc(
        name,
        argv,
        processes.process_env(SMSGW_SCHEDULE_HORIZON_SECONDS=str(HORIZON_SECONDS), PGAPPNAME=name),
    )


def _totals(proc: processes.Proc) -> dict:
    proc.popen.wait(120)
    log = proc.log()
    assert proc.popen.returncode == 0, log[-3000:]
    line = next(ln for ln in log.splitlines() if ln.startswith("MATERIALIZE_DONE "))
    return json.loads(line.removeprefix("MATERIALIZE_DONE "))


def _assert_each_occurrence_once(expected: int) -> None:
    assert Message.objects.count() == expected
    assert Message.objects.values("occurrence_key").distinct().count() == expected
    assert MessageEvent.objects.filter(kind="created").count() == expected
    per_schedule = Counter(Message.objects.values_list("schedule_id", flat=True))
    assert set(per_schedule.values()) == {PER_SCHEDULE}
    assert set(Message.objects.values_list("status", flat=True)) == {Status.SCHEDULED}


def test_two_materializers_at_once_make_each_occurrence_once():
    expected, _ = _load(600)
    start_at = str(time.time() + 4)  # both past Django start-up, then the same instant
    a = _materializer("materialize-a", "--batch-size", "10", "--start-at", start_at)
    b = _materializer("materialize-b", "--batch-size", "10", "--start-at", start_at)
    try:
        totals = [_totals(a), _totals(b)]
    finally:
        a.stop()
        b.stop()
    assert sum(t["created"] for t in totals) == expected
    assert all(t["created"] > 0 for t in totals), f"the runs did not overlap: {totals}"
    assert sum(t["existing"] for t in totals) == 0  # SKIP LOCKED: they never even tried the same schedule
    _assert_each_occurrence_once(expected)
    horizon_passed = Schedule.objects.exclude(next_occurrence_at__gt=timezone.now() + timedelta(hours=23))
    assert not horizon_passed.exists()


def _sessions_of(name: str) -> list[tuple]:
    """The server's sessions of the process started as ``name`` (_materializer), on this test database."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, state, wait_event_type, wait_event, left(query, 80) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s",
            [name],
        )
        return cursor.fetchall()


def test_a_materializer_killed_mid_run_and_restarted_makes_no_extra_occurrence():
    expected, first_due = _load(800)
    victim = _materializer("materialize-victim", "--batch-size", "10")
    deadline = time.monotonic() + 60
    while Message.objects.count() < 2000:
        assert time.monotonic() < deadline and victim.popen.poll() is None, victim.log()[-3000:]
        time.sleep(0.02)
    victim.kill9()
    # A COMMIT the server received just before the kill still completes: count once the victim's session
    # has ended at the server.
    # Its own session, not every other one on the database: a session of another kind (an autovacuum worker,
    # a connection an earlier test's thread left open) is not the victim's and may stay longer.
    try:
        wait_for(lambda: not _sessions_of(victim.name), 30, "the killed materializer's session to end")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}: {_sessions_of(victim.name)}") from None
    connection.close()
    made_before = Message.objects.count()
    assert 0 < made_before < expected, "the kill did not land mid-run"
    # Each batch committed whole or not at all: a schedule has all of its occurrences and an advanced
    # cursor, or none and its cursor untouched.
    for cursor, n in Schedule.objects.annotate(n=Count("occurrences")).values_list("next_occurrence_at", "n"):
        assert (n, cursor == first_due) in ((0, True), (PER_SCHEDULE, False)), (n, cursor)

    rescuer = _materializer("materialize-rescuer")
    try:
        totals = _totals(rescuer)
    finally:
        rescuer.stop()
    assert (totals["created"], totals["existing"]) == (expected - made_before, 0), totals
    _assert_each_occurrence_once(expected)

    # A run over cursors moved back (as if a commit had been lost) finds every key taken.
    Schedule.objects.update(next_occurrence_at=first_due, cursor_local=first_due)  # UTC: local == instant
    connection.close()
    again = _materializer("materialize-rerun")
    try:
        totals = _totals(again)
    finally:
        again.stop()
    assert totals["created"] == 0 and totals["existing"] == expected
    _assert_each_occurrence_once(expected)


CONTROL = "+14155550177"  # an active schedule beside the paused one


def test_pausing_between_materialization_and_sending_stops_the_pending_occurrences(pipeline, settings):
    # Every 3 s, made 60 s ahead: occurrences are materialized well before the sweep sends them.
    settings.SCHEDULE_MAX_PER_DAY = 100_000
    settings.SCHEDULE_HORIZON_SECONDS = 60
    pipeline.env.update(
        SMSGW_SCHEDULE_MAX_PER_DAY="100000",
        SMSGW_SCHEDULE_HORIZON_SECONDS="60",
        SMSGW_MATERIALIZE_INTERVAL="1",
    )
    _, key = tenant_with_key("acme")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    start = (timezone.now() + timedelta(seconds=6)).replace(microsecond=0, tzinfo=None)
    sids = []
    for to in (RECIPIENT, CONTROL):
        resp = api.post(
            "/v1/schedules",
            {
                "to": to,
                "body": "tick",
                "rrule": "FREQ=SECONDLY;INTERVAL=3",
                "start": start.isoformat(),
                "timezone": "UTC",
            },
            format="json",
        )
        assert resp.status_code == 201, resp.content
        assert resp.json()["occurrences"]["materialized"] >= 15
        sids.append(resp.json()["id"])
    # The second schedule stays active: occurrences it gets after the pause show the materializer ran.
    sid, control = sids
    connection.close()
    pipeline.worker()
    pipeline.beat()
    mine = Message.objects.filter(schedule__public_id=sid)
    pipeline.wait_until(lambda: mine.filter(status=Status.SENT).count() >= 2, 60, "two occurrences sent")

    paused = api.post(f"/v1/schedules/{sid}/pause")
    paused_at = timezone.now()
    assert paused.status_code == 200 and paused.json()["status"] == "paused"
    cancelled = set(paused.json()["occurrences"]["cancelled"])
    kept = {k["id"] for k in paused.json()["occurrences"]["kept"]}
    assert len(cancelled) >= 10
    connection.close()
    # Whatever was already past `queued` finishes; nothing else goes out and nothing new is made.
    pipeline.wait_until(
        lambda: not mine.filter(status__in=[Status.SCHEDULED, Status.QUEUED, Status.SENDING]).exists(),
        30,
        "in-flight occurrences to finish",
    )
    # The materializer went on after the pause (the active schedule got two more occurrences, 3 s apart,
    # made by its passes every second), and made nothing for the paused one.
    pipeline.wait_until(
        lambda: Message.objects.filter(schedule__public_id=control, created_at__gt=paused_at).count() >= 2,
        30,
        "two occurrences of the active schedule made after the pause",
    )
    assert not mine.filter(created_at__gt=paused_at).exists()
    final = dict(mine.values_list("public_id", "status"))
    assert set(final.values()) <= {Status.SENT, Status.CANCELLED}
    assert {p for p, s in final.items() if s == Status.CANCELLED} == cancelled
    assert {p for p, s in final.items() if s == Status.SENT} <= (set(final) - cancelled)
    assert kept <= {p for p, s in final.items() if s == Status.SENT}
    sent = [p for p, s in final.items() if s == Status.SENT]
    assert pipeline.submissions_by_recipient()[RECIPIENT] == len(sent)
    reasons = MessageEvent.objects.filter(message__in=mine, kind="cancelled").values_list(
        "details", flat=True
    )
    assert len(reasons) == len(cancelled) and all("paused" in d["reason"] for d in reasons)

    resumed = api.post(f"/v1/schedules/{sid}/resume")
    assert resumed.status_code == 200 and resumed.json()["version"] == 3
    connection.close()
    pipeline.wait_until(
        lambda: mine.filter(schedule_version=3, status=Status.SENT).exists(), 60, "an occurrence of version 3"
    )
    api.post(f"/v1/schedules/{sid}/cancel")
    connection.close()
    pipeline.wait_until(
        lambda: not mine.filter(status__in=[Status.SCHEDULED, Status.QUEUED, Status.SENDING]).exists(),
        30,
        "the schedule's last occurrences to finish",
    )
    assert Schedule.objects.get(public_id=sid).status == ScheduleStatus.CANCELLED
    sent_total = mine.filter(status=Status.SENT).count()
    assert pipeline.submissions_by_recipient()[RECIPIENT] == sent_total
    assert not mine.filter(status=Status.SENT, created_at__gt=paused_at, schedule_version__lt=3).exists()
    # Beat first, then the worker (the fixture stops them in start order): nothing new is published
    # while the worker shuts down, which keeps this test's teardown short.
    for proc in reversed(pipeline.procs):
        proc.stop()
