"""Occurrences in the order of their instants (scheduling.schedules.recurrence, issue 45): sub-daily rules
across spring-forward gaps and fall-back folds, merged instants once, the restart points (``after``,
``first_after``, the materializer's ``resume``) and the bounded look-ahead.

The expected instants are hand-computed from each zone's clock changes (tzdata 2025b), written out as
constants, never produced by the code under test:

* Europe/London 2027-03-28 01:00 GMT -> 02:00 BST (a 1 h gap).
* America/New_York 2027-03-14 02:00 EST (-05:00) -> 03:00 EDT (-04:00); 2027-11-07 02:00 EDT -> 01:00 EST
  (01:00-02:00 twice).
* Australia/Lord_Howe (30-minute changes): 2027-10-03 02:00 (+10:30) -> 02:30 (+11:00); 2027-04-04 02:00
  (+11:00) -> 01:30 (+10:30), 01:30-02:00 twice.
* Antarctica/Troll (2 h changes, at 01:00Z): 2027-03-28 01:00 (+00:00) -> 03:00 (+02:00); 2027-10-31 03:00
  (+02:00) -> 01:00 (+00:00), 01:00-03:00 twice.
* Asia/Kathmandu 1986-01-01 00:00 (+05:30) -> 00:15 (+05:45): a 15-minute gap at midnight, across a year.
* Asia/Pyongyang 2018-05-04 23:30 (+08:30) -> 2018-05-05 00:00 (+09:00): a gap across midnight; 2015-08-15
  00:00 (+09:00) -> 2015-08-14 23:30 (+08:30): 23:30-00:00 of 08-14 twice.
* America/Caracas 2016-05-01 02:30 (-04:30) -> 03:00 (-04:00).
* Europe/Simferopol 2014-03-30 02:00 (+02:00) -> 04:00 (+04:00, Moscow time): a 2 h gap.
* Pacific/Apia 2011-12-29 24:00 (-10:00) -> 2011-12-31 00:00 (+14:00): 2011-12-30 never happened.
* Pacific/Norfolk 2015-10-04 02:00 (+11:30) -> 01:30 (+11:00): 01:30-02:00 twice.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from itertools import islice

import pytest

from scheduling.schedules.recurrence import Recurrence, recurrence_build
from smsgw.values.timeutil import DstAdjustment

LONG_AGO = datetime(1980, 1, 1, tzinfo=UTC)
GAP, FIRST, SECOND = "gap_shifted_forward", "ambiguous_first", "ambiguous_second"


def build(rule: str, start: str, tz: str, policy: str | None = None) -> Recurrence:
    return recurrence_build(
        rrule=rule, start=start, tz_name=tz, dst_policy=policy, now=LONG_AGO, max_per_day=1000
    )


def rows(occurrences) -> list[tuple[str, str, str]]:
    return [
        (o.local.isoformat(timespec="minutes"), o.due_at.strftime("%Y-%m-%dT%H:%MZ"), o.adjustment.value)
        for o in occurrences
    ]


def at(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%MZ").replace(tzinfo=UTC)


# (zone, rule, start, policy, the occurrences in instant order: local wall time, instant, DST decision)
CASES = {
    # The report: 01:00 does not exist and merges into 02:00 BST (01:00Z); the wall-time order put
    # that instant after 01:20Z and 01:40Z.
    "london-gap-merged": (
        "Europe/London", "FREQ=MINUTELY;INTERVAL=20;COUNT=6", "2027-03-28T00:20:00", None,
        [("2027-03-28T00:20", "2027-03-28T00:20Z", "none"),
         ("2027-03-28T00:40", "2027-03-28T00:40Z", "none"),
         ("2027-03-28T02:00", "2027-03-28T01:00Z", "none"),
         ("2027-03-28T01:20", "2027-03-28T01:20Z", GAP),
         ("2027-03-28T01:40", "2027-03-28T01:40Z", GAP)],
    ),
    "london-gap-40min": (  # the example in docs/scheduling.md
        "Europe/London", "FREQ=MINUTELY;INTERVAL=40;COUNT=6", "2027-03-28T00:00:00", None,
        [("2027-03-28T00:00", "2027-03-28T00:00Z", "none"),
         ("2027-03-28T00:40", "2027-03-28T00:40Z", "none"),
         ("2027-03-28T02:00", "2027-03-28T01:00Z", "none"),
         ("2027-03-28T01:20", "2027-03-28T01:20Z", GAP),
         ("2027-03-28T02:40", "2027-03-28T01:40Z", "none"),
         ("2027-03-28T03:20", "2027-03-28T02:20Z", "none")],
    ),
    "new-york-gap-45min": (
        "America/New_York", "FREQ=MINUTELY;INTERVAL=45;COUNT=5", "2027-03-14T01:00:00", None,
        [("2027-03-14T01:00", "2027-03-14T06:00Z", "none"),
         ("2027-03-14T01:45", "2027-03-14T06:45Z", "none"),
         ("2027-03-14T03:15", "2027-03-14T07:15Z", "none"),
         ("2027-03-14T02:30", "2027-03-14T07:30Z", GAP),
         ("2027-03-14T04:00", "2027-03-14T08:00Z", "none")],
    ),
    "new-york-fold-later": (
        "America/New_York", "FREQ=MINUTELY;INTERVAL=40;COUNT=5", "2027-11-07T00:00:00", "later",
        [("2027-11-07T00:00", "2027-11-07T04:00Z", "none"),
         ("2027-11-07T00:40", "2027-11-07T04:40Z", "none"),
         ("2027-11-07T01:20", "2027-11-07T06:20Z", SECOND),
         ("2027-11-07T02:00", "2027-11-07T07:00Z", "none"),
         ("2027-11-07T02:40", "2027-11-07T07:40Z", "none")],
    ),
    "lord-howe-gap-25min": (
        "Australia/Lord_Howe", "FREQ=MINUTELY;INTERVAL=25;COUNT=6", "2027-10-03T01:10:00", None,
        [("2027-10-03T01:10", "2027-10-02T14:40Z", "none"),
         ("2027-10-03T01:35", "2027-10-02T15:05Z", "none"),
         ("2027-10-03T02:00", "2027-10-02T15:30Z", GAP),
         ("2027-10-03T02:50", "2027-10-02T15:50Z", "none"),
         ("2027-10-03T02:25", "2027-10-02T15:55Z", GAP),
         ("2027-10-03T03:15", "2027-10-02T16:15Z", "none")],
    ),
    "lord-howe-gap-hourly": (
        "Australia/Lord_Howe", "FREQ=HOURLY;BYMINUTE=0,20,40;COUNT=8", "2027-10-03T01:00:00", None,
        [("2027-10-03T01:00", "2027-10-02T14:30Z", "none"),
         ("2027-10-03T01:20", "2027-10-02T14:50Z", "none"),
         ("2027-10-03T01:40", "2027-10-02T15:10Z", "none"),
         ("2027-10-03T02:00", "2027-10-02T15:30Z", GAP),
         ("2027-10-03T02:40", "2027-10-02T15:40Z", "none"),
         ("2027-10-03T02:20", "2027-10-02T15:50Z", GAP),
         ("2027-10-03T03:00", "2027-10-02T16:00Z", "none"),
         ("2027-10-03T03:20", "2027-10-02T16:20Z", "none")],
    ),
    "lord-howe-fold-earlier": (
        "Australia/Lord_Howe", "FREQ=MINUTELY;INTERVAL=20;COUNT=5", "2027-04-04T01:00:00", None,
        [("2027-04-04T01:00", "2027-04-03T14:00Z", "none"),
         ("2027-04-04T01:20", "2027-04-03T14:20Z", "none"),
         ("2027-04-04T01:40", "2027-04-03T14:40Z", FIRST),
         ("2027-04-04T02:00", "2027-04-03T15:30Z", "none"),
         ("2027-04-04T02:20", "2027-04-03T15:50Z", "none")],
    ),
    "lord-howe-fold-later": (
        "Australia/Lord_Howe", "FREQ=MINUTELY;INTERVAL=20;COUNT=5", "2027-04-04T01:00:00", "later",
        [("2027-04-04T01:00", "2027-04-03T14:00Z", "none"),
         ("2027-04-04T01:20", "2027-04-03T14:20Z", "none"),
         ("2027-04-04T01:40", "2027-04-03T15:10Z", SECOND),
         ("2027-04-04T02:00", "2027-04-03T15:30Z", "none"),
         ("2027-04-04T02:20", "2027-04-03T15:50Z", "none")],
    ),
    "troll-gap-2h": (
        "Antarctica/Troll", "FREQ=MINUTELY;INTERVAL=50;COUNT=7", "2027-03-28T00:00:00", None,
        [("2027-03-28T00:00", "2027-03-28T00:00Z", "none"),
         ("2027-03-28T00:50", "2027-03-28T00:50Z", "none"),
         ("2027-03-28T03:20", "2027-03-28T01:20Z", "none"),
         ("2027-03-28T01:40", "2027-03-28T01:40Z", GAP),
         ("2027-03-28T04:10", "2027-03-28T02:10Z", "none"),
         ("2027-03-28T02:30", "2027-03-28T02:30Z", GAP),
         ("2027-03-28T05:00", "2027-03-28T03:00Z", "none")],
    ),
    "troll-fold-2h-earlier": (
        "Antarctica/Troll", "FREQ=MINUTELY;INTERVAL=50;COUNT=5", "2027-10-31T00:00:00", None,
        [("2027-10-31T00:00", "2027-10-30T22:00Z", "none"),
         ("2027-10-31T00:50", "2027-10-30T22:50Z", "none"),
         ("2027-10-31T01:40", "2027-10-30T23:40Z", FIRST),
         ("2027-10-31T02:30", "2027-10-31T00:30Z", FIRST),
         ("2027-10-31T03:20", "2027-10-31T03:20Z", "none")],
    ),
    "troll-fold-2h-later": (
        "Antarctica/Troll", "FREQ=MINUTELY;INTERVAL=50;COUNT=5", "2027-10-31T00:00:00", "later",
        [("2027-10-31T00:00", "2027-10-30T22:00Z", "none"),
         ("2027-10-31T00:50", "2027-10-30T22:50Z", "none"),
         ("2027-10-31T01:40", "2027-10-31T01:40Z", SECOND),
         ("2027-10-31T02:30", "2027-10-31T02:30Z", SECOND),
         ("2027-10-31T03:20", "2027-10-31T03:20Z", "none")],
    ),
    "kathmandu-gap-15min-new-year": (
        "Asia/Kathmandu", "FREQ=MINUTELY;INTERVAL=10;COUNT=6", "1985-12-31T23:40:00", None,
        [("1985-12-31T23:40", "1985-12-31T18:10Z", "none"),
         ("1985-12-31T23:50", "1985-12-31T18:20Z", "none"),
         ("1986-01-01T00:00", "1985-12-31T18:30Z", GAP),
         ("1986-01-01T00:20", "1985-12-31T18:35Z", "none"),
         ("1986-01-01T00:10", "1985-12-31T18:40Z", GAP),
         ("1986-01-01T00:30", "1985-12-31T18:45Z", "none")],
    ),
    "pyongyang-gap-across-midnight": (
        "Asia/Pyongyang", "FREQ=MINUTELY;INTERVAL=20;COUNT=5", "2018-05-04T23:00:00", None,
        [("2018-05-04T23:00", "2018-05-04T14:30Z", "none"),
         ("2018-05-04T23:20", "2018-05-04T14:50Z", "none"),
         ("2018-05-05T00:00", "2018-05-04T15:00Z", "none"),
         ("2018-05-04T23:40", "2018-05-04T15:10Z", GAP),
         ("2018-05-05T00:20", "2018-05-04T15:20Z", "none")],
    ),
    "pyongyang-fold-later": (
        "Asia/Pyongyang", "FREQ=MINUTELY;INTERVAL=20;COUNT=5", "2015-08-14T23:00:00", "later",
        [("2015-08-14T23:00", "2015-08-14T14:00Z", "none"),
         ("2015-08-14T23:20", "2015-08-14T14:20Z", "none"),
         ("2015-08-14T23:40", "2015-08-14T15:10Z", SECOND),
         ("2015-08-15T00:00", "2015-08-14T15:30Z", "none"),
         ("2015-08-15T00:20", "2015-08-14T15:50Z", "none")],
    ),
    "caracas-gap-30min": (
        "America/Caracas", "FREQ=MINUTELY;INTERVAL=20;COUNT=5", "2016-05-01T02:00:00", None,
        [("2016-05-01T02:00", "2016-05-01T06:30Z", "none"),
         ("2016-05-01T02:20", "2016-05-01T06:50Z", "none"),
         ("2016-05-01T03:00", "2016-05-01T07:00Z", "none"),
         ("2016-05-01T02:40", "2016-05-01T07:10Z", GAP),
         ("2016-05-01T03:20", "2016-05-01T07:20Z", "none")],
    ),
    "simferopol-gap-2h": (
        "Europe/Simferopol", "FREQ=MINUTELY;INTERVAL=75;COUNT=5", "2014-03-30T01:00:00", None,
        [("2014-03-30T01:00", "2014-03-29T23:00Z", "none"),
         ("2014-03-30T02:15", "2014-03-30T00:15Z", GAP),
         ("2014-03-30T04:45", "2014-03-30T00:45Z", "none"),
         ("2014-03-30T03:30", "2014-03-30T01:30Z", GAP),
         ("2014-03-30T06:00", "2014-03-30T02:00Z", "none")],
    ),
    "apia-skipped-day-hourly": (
        "Pacific/Apia", "FREQ=HOURLY;INTERVAL=5;COUNT=12", "2011-12-29T20:00:00", None,
        [("2011-12-29T20:00", "2011-12-30T06:00Z", "none"),
         ("2011-12-30T01:00", "2011-12-30T11:00Z", GAP),
         ("2011-12-31T02:00", "2011-12-30T12:00Z", "none"),
         ("2011-12-30T06:00", "2011-12-30T16:00Z", GAP),
         ("2011-12-31T07:00", "2011-12-30T17:00Z", "none"),
         ("2011-12-30T11:00", "2011-12-30T21:00Z", GAP),
         ("2011-12-31T12:00", "2011-12-30T22:00Z", "none"),
         ("2011-12-30T16:00", "2011-12-31T02:00Z", GAP),
         ("2011-12-31T17:00", "2011-12-31T03:00Z", "none"),
         ("2011-12-30T21:00", "2011-12-31T07:00Z", GAP),
         ("2011-12-31T22:00", "2011-12-31T08:00Z", "none"),
         ("2012-01-01T03:00", "2011-12-31T13:00Z", "none")],
    ),
    "norfolk-fold-30min-later": (
        "Pacific/Norfolk", "FREQ=MINUTELY;INTERVAL=20;COUNT=4", "2015-10-04T01:00:00", "later",
        [("2015-10-04T01:00", "2015-10-03T13:30Z", "none"),
         ("2015-10-04T01:20", "2015-10-03T13:50Z", "none"),
         ("2015-10-04T01:40", "2015-10-03T14:40Z", SECOND),
         ("2015-10-04T02:00", "2015-10-03T15:00Z", "none")],
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_occurrences_come_in_instant_order_across_the_change(case):
    tz, rule, start, policy, expected = CASES[case]
    assert rows(build(rule, start, tz, policy).occurrences()) == expected


@pytest.mark.parametrize("case", CASES)
def test_after_and_first_after_cut_the_same_order_at_every_instant(case):
    """``after`` (the preview) and ``first_after`` (a new cursor) restart the rule near the instant asked
    for: every cut gives the rest of the list in order, and ``count`` keeps its first instants."""
    tz, rule, start, policy, expected = CASES[case]
    rec = build(rule, start, tz, policy)
    for i, (_, instant, _) in enumerate(expected):
        just_before = at(instant) - timedelta(seconds=1)
        assert rows(rec.after(just_before)) == expected[i:], instant
        assert rows(rec.after(at(instant))) == expected[i + 1 :], instant
        first = rec.first_after(just_before)
        assert first is not None and rows([first]) == [expected[i]]
        for count in range(1, len(expected) - i + 1):
            assert rows(islice(rec.after(just_before), count)) == expected[i : i + count]


@pytest.mark.parametrize("case", CASES)
def test_the_materializer_resumes_at_every_cursor_without_skipping_an_instant(case):
    """``resume`` from the cursor a claim leaves (the first occurrence not made) gives every later
    instant; besides, only occurrences after the cursor's wall time that sort before it (made already,
    and offered again for cursors stored in wall-time order) may come first."""
    tz, rule, start, policy, expected = CASES[case]
    rec = build(rule, start, tz, policy)
    for i, (local, instant, _) in enumerate(expected):
        cursor_local, cursor_at = datetime.fromisoformat(local), at(instant)
        resumed = rows(rec.resume(cursor_local, cursor_at))
        again = [r for r in resumed if at(r[1]) < cursor_at]
        assert resumed == again + expected[i:], local
        assert set(again) <= set(expected[:i])
        assert all(datetime.fromisoformat(r[0]) > cursor_local for r in again)


def test_a_gap_shifted_occurrence_is_not_merged_into_an_excluded_one():
    # London 2027-03-28, every 20 minutes: 01:00 would merge into 02:00 BST (01:00Z), but 02:00 is an
    # exception, so the gap-shifted 01:00 stands for that instant, in its place.
    rec = recurrence_build(
        rrule="FREQ=MINUTELY;INTERVAL=20;COUNT=6",
        start="2027-03-28T00:20:00",
        tz_name="Europe/London",
        dst_policy=None,
        exdate=["2027-03-28T02:00:00"],
        now=LONG_AGO,
        max_per_day=1000,
    )
    assert rows(rec.occurrences()) == [
        ("2027-03-28T00:20", "2027-03-28T00:20Z", "none"),
        ("2027-03-28T00:40", "2027-03-28T00:40Z", "none"),
        ("2027-03-28T01:00", "2027-03-28T01:00Z", GAP),
        ("2027-03-28T01:20", "2027-03-28T01:20Z", GAP),
        ("2027-03-28T01:40", "2027-03-28T01:40Z", GAP),
    ]


def test_a_gap_shifted_occurrence_comes_out_without_walking_the_rule_past_its_gap():
    """The look-ahead is bounded by the gap: a yearly 02:30 on New York's spring-forward Sunday is
    yielded once the rule has been walked to 03:30, not a year further to the next instance."""
    rec = build("FREQ=YEARLY;BYMONTH=3;BYDAY=2SU", "2027-03-14T02:30:00", "America/New_York")
    pulled: list[datetime] = []
    instances = rec.instances

    def recording(*args, **kwargs):
        for instance in instances(*args, **kwargs):
            pulled.append(instance)
            yield instance

    rec.instances = recording
    first = next(rec.occurrences())
    assert rows([first]) == [("2027-03-14T02:30", "2027-03-14T07:30Z", GAP)]
    assert pulled == [datetime(2027, 3, 14, 2, 30)]


# --- every clock change of several zones, against a plain sort ------------------------------------------

# (zone, a local time a few hours before a clock change): gaps and folds of 15 min to 24 h.
CHANGES = [
    ("Europe/London", "2027-03-28T01:00"),
    ("Europe/London", "2027-10-31T02:00"),
    ("America/New_York", "2027-03-14T02:00"),
    ("America/New_York", "2027-11-07T02:00"),
    ("Australia/Lord_Howe", "2027-10-03T02:00"),
    ("Australia/Lord_Howe", "2027-04-04T02:00"),
    ("Antarctica/Troll", "2027-03-28T01:00"),
    ("Antarctica/Troll", "2027-10-31T03:00"),
    ("Asia/Kathmandu", "1986-01-01T00:00"),
    ("Asia/Pyongyang", "2018-05-04T23:30"),
    ("Asia/Pyongyang", "2015-08-15T00:00"),
    ("America/Caracas", "2016-05-01T02:30"),
    ("America/Caracas", "2007-12-09T03:00"),
    ("Europe/Simferopol", "2014-03-30T02:00"),
    ("Pacific/Apia", "2011-12-30T00:00"),
    ("Pacific/Norfolk", "2015-10-04T02:00"),
    ("Pacific/Chatham", "2027-09-26T02:45"),
    ("Pacific/Chatham", "2027-04-04T03:45"),
]


def _random_sub_daily_rule(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return f"FREQ=MINUTELY;INTERVAL={rng.choice([7, 10, 13, 20, 25, 35, 40, 45, 50, 70, 75, 95])}"
    minutes = ",".join(str(m) for m in sorted(rng.sample(range(60), rng.randint(1, 3))))
    return f"FREQ=HOURLY;INTERVAL={rng.choice([1, 1, 2, 3, 5, 7])};BYMINUTE={minutes}"


def _sorted_reference(rec: Recurrence, until_local: datetime) -> list[tuple[datetime, datetime]]:
    """Every instance resolved on its own, exceptions removed, one per instant (the instance that
    exists wins over a gap-shifted one landing on it), sorted by instant."""
    by_instant: dict[datetime, tuple[datetime, bool]] = {}
    for local in rec.instances(until_local=until_local):
        if rec.is_excluded(local):
            continue
        resolved = rec.resolve(local)
        shifted = resolved.adjustment is DstAdjustment.GAP_SHIFTED
        if resolved.due_at not in by_instant or by_instant[resolved.due_at][1]:
            by_instant[resolved.due_at] = (local, shifted)
    return sorted((instant, local) for instant, (local, _) in by_instant.items())


@pytest.mark.parametrize(("tz", "change"), CHANGES, ids=[f"{tz}-{at[:10]}" for tz, at in CHANGES])
def test_random_sub_daily_rules_come_in_the_order_of_a_plain_sort(tz, change):
    rng = random.Random(f"45:{tz}:{change}")
    moment = datetime.fromisoformat(change)
    for _ in range(6):
        rule = _random_sub_daily_rule(rng)
        start = (moment - timedelta(hours=rng.randint(1, 30), minutes=rng.randrange(60))).isoformat()
        policy = rng.choice(["earlier", "later"])
        rec = build(rule, start, tz, policy)
        until = datetime.fromisoformat(start) + timedelta(hours=72)
        if rng.random() < 0.5:
            # Exceptions among the instances near the change: a gap-shifted occurrence whose landing
            # point is excluded stands for that instant instead of merging into it.
            near = list(rec.instances(moment - timedelta(hours=1), until_local=moment + timedelta(hours=3)))
            exdate = [t.isoformat() for t in rng.sample(near, min(2, len(near)))]
            rec = recurrence_build(
                rrule=rule, start=start, tz_name=tz, dst_policy=policy, exdate=exdate, now=LONG_AGO,
                max_per_day=1000,
            )  # fmt: skip
        # A wall time moves by at most a day, so every instant up to `settled` has its instance in range.
        settled = rec.resolve(until - timedelta(days=2)).due_at
        expected = [x for x in _sorted_reference(rec, until) if x[0] < settled]
        got = [(o.due_at, o.local) for o in rec.occurrences(until_local=until)][: len(expected)]
        assert got == expected, (rule, start, policy, sorted(rec.exdates))
        for instant, local in expected[:: max(1, len(expected) // 15)]:
            rest = [x for x in expected if x[0] >= instant]
            # Past `settled` the instances were cut by `until`; the re-offered ones before the cursor's
            # instant are at most a gap's worth.
            resumed = [(o.due_at, o.local) for o in islice(rec.resume(local, instant), len(rest) + 50)]
            assert [x for x in resumed if x[0] >= instant][: len(rest)] == rest, (rule, start, local)
            after = [(o.due_at, o.local) for o in islice(rec.after(instant - timedelta(seconds=1)), 10)]
            assert after[: len(rest)] == rest[:10], (rule, start, instant)
