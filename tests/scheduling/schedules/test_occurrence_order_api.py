"""Occurrences in instant order through the API and the materializer (issue 45): the preview's order and
its ``count`` cuts, and, with the shortest horizon (60 s), every occurrence made before its instant and
the schedule's ``next_occurrence_at`` always the earliest instant not yet made.

The expected instants are hand-computed from each zone's clock changes in 2031 (tzdata 2025b):

* Europe/London 2031-03-30 01:00 GMT -> 02:00 BST (1 h gap).
* America/New_York 2031-03-09 02:00 EST (-05:00) -> 03:00 EDT (-04:00).
* Australia/Lord_Howe 2031-10-05 02:00 (+10:30) -> 02:30 (+11:00); 2031-04-06 02:00 (+11:00) -> 01:30
  (+10:30), 01:30-02:00 twice.
* Antarctica/Troll (at 01:00Z) 2031-03-30 01:00 (+00:00) -> 03:00 (+02:00); 2031-10-26 03:00 (+02:00) ->
  01:00 (+00:00), 01:00-03:00 twice.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduling.models import Message, MessageEvent, Schedule, ScheduleStatus
from scheduling.schedules.materialize import schedules_materialize
from tests.factories import RECIPIENT

# SQLite half too: the materializer claims and advances schedules differently on SQLite.
pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

GAP, FIRST, SECOND = "gap_shifted_forward", "ambiguous_first", "ambiguous_second"

# (zone, rule, start, dst_policy, the occurrences in instant order: local wall time, instant, DST decision)
CASES = {
    # The report: 01:00 does not exist and merges into 02:00 BST (01:00Z), which the wall-time
    # order listed after 01:20Z and 01:40Z.
    "london-gap-merged": (
        "Europe/London", "FREQ=MINUTELY;INTERVAL=20;COUNT=6", "2031-03-30T00:20:00", None,
        [("2031-03-30T00:20:00", "2031-03-30T00:20:00Z", "none"),
         ("2031-03-30T00:40:00", "2031-03-30T00:40:00Z", "none"),
         ("2031-03-30T02:00:00", "2031-03-30T01:00:00Z", "none"),
         ("2031-03-30T01:20:00", "2031-03-30T01:20:00Z", GAP),
         ("2031-03-30T01:40:00", "2031-03-30T01:40:00Z", GAP)],
    ),
    "new-york-gap-45min": (
        "America/New_York", "FREQ=MINUTELY;INTERVAL=45;COUNT=5", "2031-03-09T01:00:00", None,
        [("2031-03-09T01:00:00", "2031-03-09T06:00:00Z", "none"),
         ("2031-03-09T01:45:00", "2031-03-09T06:45:00Z", "none"),
         ("2031-03-09T03:15:00", "2031-03-09T07:15:00Z", "none"),
         ("2031-03-09T02:30:00", "2031-03-09T07:30:00Z", GAP),
         ("2031-03-09T04:00:00", "2031-03-09T08:00:00Z", "none")],
    ),
    "lord-howe-gap-hourly": (
        "Australia/Lord_Howe", "FREQ=HOURLY;BYMINUTE=0,20,40;COUNT=8", "2031-10-05T01:00:00", None,
        [("2031-10-05T01:00:00", "2031-10-04T14:30:00Z", "none"),
         ("2031-10-05T01:20:00", "2031-10-04T14:50:00Z", "none"),
         ("2031-10-05T01:40:00", "2031-10-04T15:10:00Z", "none"),
         ("2031-10-05T02:00:00", "2031-10-04T15:30:00Z", GAP),
         ("2031-10-05T02:40:00", "2031-10-04T15:40:00Z", "none"),
         ("2031-10-05T02:20:00", "2031-10-04T15:50:00Z", GAP),
         ("2031-10-05T03:00:00", "2031-10-04T16:00:00Z", "none"),
         ("2031-10-05T03:20:00", "2031-10-04T16:20:00Z", "none")],
    ),
    "lord-howe-fold-later": (
        "Australia/Lord_Howe", "FREQ=MINUTELY;INTERVAL=20;COUNT=5", "2031-04-06T01:00:00", "later",
        [("2031-04-06T01:00:00", "2031-04-05T14:00:00Z", "none"),
         ("2031-04-06T01:20:00", "2031-04-05T14:20:00Z", "none"),
         ("2031-04-06T01:40:00", "2031-04-05T15:10:00Z", SECOND),
         ("2031-04-06T02:00:00", "2031-04-05T15:30:00Z", "none"),
         ("2031-04-06T02:20:00", "2031-04-05T15:50:00Z", "none")],
    ),
    "troll-gap-2h": (
        "Antarctica/Troll", "FREQ=MINUTELY;INTERVAL=50;COUNT=7", "2031-03-30T00:00:00", None,
        [("2031-03-30T00:00:00", "2031-03-30T00:00:00Z", "none"),
         ("2031-03-30T00:50:00", "2031-03-30T00:50:00Z", "none"),
         ("2031-03-30T03:20:00", "2031-03-30T01:20:00Z", "none"),
         ("2031-03-30T01:40:00", "2031-03-30T01:40:00Z", GAP),
         ("2031-03-30T04:10:00", "2031-03-30T02:10:00Z", "none"),
         ("2031-03-30T02:30:00", "2031-03-30T02:30:00Z", GAP),
         ("2031-03-30T05:00:00", "2031-03-30T03:00:00Z", "none")],
    ),
    "troll-fold-2h-earlier": (
        "Antarctica/Troll", "FREQ=MINUTELY;INTERVAL=50;COUNT=5", "2031-10-26T00:00:00", None,
        [("2031-10-26T00:00:00", "2031-10-25T22:00:00Z", "none"),
         ("2031-10-26T00:50:00", "2031-10-25T22:50:00Z", "none"),
         ("2031-10-26T01:40:00", "2031-10-25T23:40:00Z", FIRST),
         ("2031-10-26T02:30:00", "2031-10-26T00:30:00Z", FIRST),
         ("2031-10-26T03:20:00", "2031-10-26T03:20:00Z", "none")],
    ),
}  # fmt: skip


def create(api, case: str) -> str:
    tz, rule, start, policy, _ = CASES[case]
    body = {"to": RECIPIENT, "body": "Pill", "rrule": rule, "start": start, "timezone": tz}
    if policy:
        body["dst_policy"] = policy
    resp = api.post("/v1/schedules", body, format="json")
    assert resp.status_code == 201, resp.content
    return resp.json()["id"]


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


@pytest.mark.parametrize("case", CASES)
def test_the_preview_lists_instants_in_order_and_count_keeps_the_first_ones(api, case):
    expected = CASES[case][4]
    sid = create(api, case)
    after = (instant(expected[0][1]) - timedelta(minutes=1)).isoformat().replace("+00:00", "Z")

    def preview(count: int) -> list[tuple[str, str, str]]:
        resp = api.get(f"/v1/schedules/{sid}/occurrences?count={count}&after={after}")
        assert resp.status_code == 200, resp.content
        return [
            (o["local_time"], o["occurrence_at"], o["dst_adjustment"]) for o in resp.json()["occurrences"]
        ]

    assert preview(len(expected) + 3) == expected  # a COUNT rule: nothing after its last occurrence
    for count in range(1, len(expected)):
        assert preview(count) == expected[:count], count
    # The schedule's cursor is its earliest instant, whatever wall time comes first.
    schedule = api.get(f"/v1/schedules/{sid}").json()
    assert schedule["next_occurrence"] == {"local_time": expected[0][0], "occurrence_at": expected[0][1]}


def _made(sid: str) -> dict[tuple[str, str, str], datetime]:
    """The occurrences made so far, each with the time of the run that made it (its "created" event)."""
    events = MessageEvent.objects.filter(message__schedule__public_id=sid, kind="created").select_related(
        "message"
    )
    return {
        (
            naive_iso(e.message.requested_local_time),
            e.message.due_at.isoformat().replace("+00:00", "Z"),
            e.message.dst_adjustment,
        ): (e.created_at)
        for e in events
    }


def naive_iso(value: datetime | None) -> str:
    assert value is not None
    return value.astimezone(UTC).replace(tzinfo=None).isoformat()


def _claim_every_minute(sid: str, expected, *, first: datetime, last: datetime) -> None:
    """Run the materializer once a minute from ``first`` to ``last``, as beat would with a 60-s horizon,
    checking the cursor after each run. The minutes before the cursor comes within the horizon are
    skipped: a run there claims nothing (its query asks for a cursor within the horizon)."""
    now = first
    while now <= last:
        schedules_materialize(now=now)
        made = {key[1] for key in _made(sid)}
        waiting = [instant(at) for _, at, _ in expected if at not in made]
        schedule = Schedule.objects.get(public_id=sid)
        # The cursor is the earliest instant not made yet (None once the COUNT rule is done).
        assert schedule.next_occurrence_at == (min(waiting) if waiting else None), now
        if schedule.next_occurrence_at is None:
            break
        now = max(now + timedelta(minutes=1), schedule.next_occurrence_at - timedelta(minutes=1))


@pytest.mark.parametrize("case", CASES)
def test_a_60_second_horizon_makes_every_occurrence_before_its_instant(api, settings, case):
    settings.SCHEDULE_HORIZON_SECONDS = 60
    expected = CASES[case][4]
    sid = create(api, case)
    assert not Message.objects.filter(schedule__public_id=sid).exists()  # years ahead: nothing yet
    instants = [instant(at) for _, at, _ in expected]
    _claim_every_minute(sid, expected, first=min(instants) - timedelta(minutes=3), last=max(instants))
    made = _made(sid)
    assert sorted(made) == sorted(expected)
    for (_, at, _), made_at in made.items():
        # Made by the last run before its instant: within the horizon, never after the instant.
        assert instant(at) - timedelta(seconds=60) <= made_at < instant(at), at
    schedule = Schedule.objects.get(public_id=sid)
    assert schedule.status == ScheduleStatus.ENDED
    # A run after a gap-shifted cursor offers again the occurrences it made past that wall time
    # (Recurrence.resume): their keys make them no-ops, and they are not counted twice.
    assert schedule.materialized_count == len(expected)


def test_a_cursor_stored_in_wall_time_order_loses_no_occurrence(api, settings):
    """Before occurrences came in instant order, the cursor after 00:50Z was the next wall time, 01:40
    (gap-shifted, 01:40Z), although 03:20 (01:20Z) comes before it. A schedule saved so when this
    version starts makes 03:20 at its next run (late, as the wall-time order did too), not never."""
    settings.SCHEDULE_HORIZON_SECONDS = 60
    expected = CASES["troll-gap-2h"][4]
    sid = create(api, "troll-gap-2h")
    day = datetime(2031, 3, 30, tzinfo=UTC)
    _claim_every_minute(sid, expected, first=day - timedelta(minutes=3), last=day + timedelta(minutes=49))
    assert sorted(_made(sid)) == sorted(expected[:2])
    Schedule.objects.filter(public_id=sid).update(
        cursor_local=datetime(2031, 3, 30, 1, 40, tzinfo=UTC),
        next_occurrence_at=day + timedelta(hours=1, minutes=40),
    )
    report = schedules_materialize(now=day + timedelta(hours=1, minutes=39))
    assert report.created == 2
    made = _made(sid)
    assert made[expected[2]] == made[expected[3]] == day + timedelta(hours=1, minutes=39)
    _claim_every_minute(
        sid, expected, first=day + timedelta(hours=1, minutes=40), last=day + timedelta(hours=3)
    )
    assert sorted(_made(sid)) == sorted(expected)
