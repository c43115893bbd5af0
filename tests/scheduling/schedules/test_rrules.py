"""Recurrence parsing and expansion. The expected instants are hand-computed from each zone's rules and
the calendar, written out as constants (never produced by dateutil):

* America/New_York: EST -05:00 / EDT -04:00. 2027: DST starts Sun 03-14 02:00 -> 03:00, ends Sun 11-07
  02:00 -> 01:00. 1996-1998 (the RFC 5545 examples): EDT from the first Sunday of April to the last
  Sunday of October (1997-10-26).
* Europe/London: GMT / BST +01:00; 2027-03-28 01:00 -> 02:00, 2027-10-31 02:00 -> 01:00.
* Europe/Berlin: CET +01:00 / CEST +02:00; 2027-03-28 02:00 -> 03:00, 2027-10-31 03:00 -> 02:00.
* Australia/Sydney (southern DST): AEDT +11:00 until Sun 2027-04-04 03:00 -> 02:00 AEST +10:00; AEDT again
  from Sun 2027-10-03 02:00 -> 03:00.
* Australia/Lord_Howe (30-minute DST): +11:00 until 2027-04-04 02:00 -> 01:30 (+10:30); +11:00 again from
  2027-10-03 02:00 -> 02:30.
* Asia/Kolkata: +05:30 all year.
* Pacific/Apia: -10:00 until the end of 2011-12-29, then +14:00 from 2011-12-31 00:00 (2011-12-30 never
  happened).
* Weekdays: 2027-01-01 is a Friday; 2026-12-01 a Tuesday; 2011-12-30 a Friday.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from itertools import islice

import pytest
from dateutil import rrule as du

from scheduling.schedules.expansion import _iterate, _stop_at
from scheduling.schedules.recurrence import Recurrence, recurrence_build
from scheduling.schedules.rrules import RuleError, parse_exdates, parse_rrule

LONG_AGO = datetime(1990, 1, 1, tzinfo=UTC)


def expand(rrule, start, tz, n=None, *, policy=None, exdate=None):
    rec = recurrence_build(
        rrule=rrule, start=start, tz_name=tz, dst_policy=policy, exdate=exdate, now=LONG_AGO, max_per_day=1000
    )
    return [
        (o.local.isoformat(timespec="minutes"), o.due_at.strftime("%Y-%m-%dT%H:%MZ"), o.adjustment.value)
        for o in islice(rec.occurrences(), n)
    ]


def utc_only(rows):
    return [(local, at) for local, at, _ in rows]


# --- the example --------------------------------------------------------------------------


def test_every_weekday_0830_berlin_until_june_2027_except_christmas():
    rows = expand(
        "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;UNTIL=20270630T215959Z",
        "2026-12-01T08:30:00",
        "Europe/Berlin",
        exdate=["2026-12-25"],
    )
    # Weekdays 2026-12-01..2027-06-30: Dec 23, Jan 21, Feb 20, Mar 23, Apr 22, May 21, Jun 22 = 152, minus
    # 12-25.
    assert len(rows) == 151
    assert rows[:3] == [
        ("2026-12-01T08:30", "2026-12-01T07:30Z", "none"),
        ("2026-12-02T08:30", "2026-12-02T07:30Z", "none"),
        ("2026-12-03T08:30", "2026-12-03T07:30Z", "none"),
    ]
    by_local = dict(utc_only(rows))
    assert by_local["2026-12-24T08:30"] == "2026-12-24T07:30Z"
    assert "2026-12-25T08:30" not in by_local
    assert by_local["2026-12-28T08:30"] == "2026-12-28T07:30Z"
    # 08:30 local on both sides of the spring change: CET before, CEST after.
    assert by_local["2027-03-26T08:30"] == "2027-03-26T07:30Z"
    assert by_local["2027-03-29T08:30"] == "2027-03-29T06:30Z"
    assert rows[-1] == ("2027-06-30T08:30", "2027-06-30T06:30Z", "none")


# --- zones ------------------------------------------------------------------------------------------


def test_new_york_daily_0230_across_spring_forward_moves_by_the_gap():
    assert expand("FREQ=DAILY", "2027-03-12T02:30:00", "America/New_York", 4) == [
        ("2027-03-12T02:30", "2027-03-12T07:30Z", "none"),
        ("2027-03-13T02:30", "2027-03-13T07:30Z", "none"),
        ("2027-03-14T02:30", "2027-03-14T07:30Z", "gap_shifted_forward"),  # 03:30 EDT
        ("2027-03-15T02:30", "2027-03-15T06:30Z", "none"),
    ]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (None, ("2027-11-07T01:30", "2027-11-07T05:30Z", "ambiguous_first")),
        ("later", ("2027-11-07T01:30", "2027-11-07T06:30Z", "ambiguous_second")),
    ],
)
def test_new_york_daily_0130_across_fall_back_takes_the_requested_reading(policy, expected):
    assert expand("FREQ=DAILY", "2027-11-06T01:30:00", "America/New_York", 3, policy=policy) == [
        ("2027-11-06T01:30", "2027-11-06T05:30Z", "none"),
        expected,
        ("2027-11-08T01:30", "2027-11-08T06:30Z", "none"),
    ]


def test_new_york_weekdays_0830_stay_0830_local():
    rows = expand("FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR", "2027-03-11T08:30:00", "America/New_York", 4)
    assert utc_only(rows) == [
        ("2027-03-11T08:30", "2027-03-11T13:30Z"),
        ("2027-03-12T08:30", "2027-03-12T13:30Z"),
        ("2027-03-15T08:30", "2027-03-15T12:30Z"),
        ("2027-03-16T08:30", "2027-03-16T12:30Z"),
    ]


def test_hourly_rule_merges_the_gap_hour_into_the_real_one():
    # 02:30 does not exist on 2027-03-14; moved forward it would be 03:30, which the rule has anyway.
    assert expand("FREQ=HOURLY", "2027-03-14T00:30:00", "America/New_York", 4) == [
        ("2027-03-14T00:30", "2027-03-14T05:30Z", "none"),
        ("2027-03-14T01:30", "2027-03-14T06:30Z", "none"),
        ("2027-03-14T03:30", "2027-03-14T07:30Z", "none"),
        ("2027-03-14T04:30", "2027-03-14T08:30Z", "none"),
    ]


def test_london_0130_across_both_changes():
    assert expand("FREQ=DAILY", "2027-03-27T01:30:00", "Europe/London", 3) == [
        ("2027-03-27T01:30", "2027-03-27T01:30Z", "none"),
        ("2027-03-28T01:30", "2027-03-28T01:30Z", "gap_shifted_forward"),  # 02:30 BST
        ("2027-03-29T01:30", "2027-03-29T00:30Z", "none"),
    ]
    assert expand("FREQ=DAILY", "2027-10-30T01:30:00", "Europe/London", 3) == [
        ("2027-10-30T01:30", "2027-10-30T00:30Z", "none"),
        ("2027-10-31T01:30", "2027-10-31T00:30Z", "ambiguous_first"),
        ("2027-11-01T01:30", "2027-11-01T01:30Z", "none"),
    ]


def test_sydney_southern_dst_ends_in_april_and_starts_in_october():
    assert expand("FREQ=DAILY", "2027-04-03T02:30:00", "Australia/Sydney", 3) == [
        ("2027-04-03T02:30", "2027-04-02T15:30Z", "none"),
        ("2027-04-04T02:30", "2027-04-03T15:30Z", "ambiguous_first"),
        ("2027-04-05T02:30", "2027-04-04T16:30Z", "none"),
    ]
    assert expand("FREQ=DAILY", "2027-04-03T02:30:00", "Australia/Sydney", 3, policy="later")[1] == (
        "2027-04-04T02:30",
        "2027-04-03T16:30Z",
        "ambiguous_second",
    )
    assert expand("FREQ=DAILY", "2027-10-02T02:30:00", "Australia/Sydney", 3) == [
        ("2027-10-02T02:30", "2027-10-01T16:30Z", "none"),
        ("2027-10-03T02:30", "2027-10-02T16:30Z", "gap_shifted_forward"),  # 03:30 AEDT
        ("2027-10-04T02:30", "2027-10-03T15:30Z", "none"),
    ]
    rows = expand("FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR", "2027-04-01T08:30:00", "Australia/Sydney", 3)
    assert utc_only(rows) == [
        ("2027-04-01T08:30", "2027-03-31T21:30Z"),
        ("2027-04-02T08:30", "2027-04-01T21:30Z"),
        ("2027-04-05T08:30", "2027-04-04T22:30Z"),
    ]


def test_lord_howe_half_hour_dst():
    assert expand("FREQ=DAILY", "2027-04-03T01:45:00", "Australia/Lord_Howe", 3) == [
        ("2027-04-03T01:45", "2027-04-02T14:45Z", "none"),
        ("2027-04-04T01:45", "2027-04-03T14:45Z", "ambiguous_first"),
        ("2027-04-05T01:45", "2027-04-04T15:15Z", "none"),
    ]
    assert expand("FREQ=DAILY", "2027-10-02T02:15:00", "Australia/Lord_Howe", 3) == [
        ("2027-10-02T02:15", "2027-10-01T15:45Z", "none"),
        ("2027-10-03T02:15", "2027-10-02T15:45Z", "gap_shifted_forward"),  # +30 min: 02:45 (+11:00)
        ("2027-10-04T02:15", "2027-10-03T15:15Z", "none"),
    ]
    # Every 30 minutes: the nonexistent 02:00 would move onto the real 02:30, so it merges into it.
    assert expand("FREQ=MINUTELY;INTERVAL=30", "2027-10-03T01:30:00", "Australia/Lord_Howe", 3) == [
        ("2027-10-03T01:30", "2027-10-02T15:00Z", "none"),
        ("2027-10-03T02:30", "2027-10-02T15:30Z", "none"),
        ("2027-10-03T03:00", "2027-10-02T16:00Z", "none"),
    ]


def test_kolkata_has_no_dst_and_the_31st_skips_short_months():
    assert utc_only(expand("FREQ=DAILY", "2027-03-27T08:30:00", "Asia/Kolkata", 3)) == [
        ("2027-03-27T08:30", "2027-03-27T03:00Z"),
        ("2027-03-28T08:30", "2027-03-28T03:00Z"),
        ("2027-03-29T08:30", "2027-03-29T03:00Z"),
    ]
    assert utc_only(expand("FREQ=MONTHLY;BYMONTHDAY=31", "2027-01-01T09:00:00", "Asia/Kolkata", 7)) == [
        ("2027-01-31T09:00", "2027-01-31T03:30Z"),
        ("2027-03-31T09:00", "2027-03-31T03:30Z"),
        ("2027-05-31T09:00", "2027-05-31T03:30Z"),
        ("2027-07-31T09:00", "2027-07-31T03:30Z"),
        ("2027-08-31T09:00", "2027-08-31T03:30Z"),
        ("2027-10-31T09:00", "2027-10-31T03:30Z"),
        ("2027-12-31T09:00", "2027-12-31T03:30Z"),
    ]


def test_negative_monthday_is_the_last_day_including_leap_february():
    rows = expand("FREQ=MONTHLY;BYMONTHDAY=-1", "2027-01-01T09:00:00", "Asia/Kolkata", 4)
    assert [local for local, _, _ in rows] == [
        "2027-01-31T09:00",
        "2027-02-28T09:00",
        "2027-03-31T09:00",
        "2027-04-30T09:00",
    ]
    assert expand("FREQ=MONTHLY;BYMONTHDAY=-1", "2028-02-01T09:00:00", "Asia/Kolkata", 1)[0][0] == (
        "2028-02-29T09:00"
    )


def test_apia_skipped_calendar_day():
    # A daily 08:30 on the day that never existed would move 24 h onto 12-31 08:30: merged, not doubled.
    assert expand("FREQ=DAILY", "2011-12-28T08:30:00", "Pacific/Apia", 4) == [
        ("2011-12-28T08:30", "2011-12-28T18:30Z", "none"),
        ("2011-12-29T08:30", "2011-12-29T18:30Z", "none"),
        ("2011-12-31T08:30", "2011-12-30T18:30Z", "none"),
        ("2012-01-01T08:30", "2011-12-31T18:30Z", "none"),
    ]
    # Fridays: 2011-12-30 did not exist; moved forward by the gap it is Saturday 08:30 (+14:00).
    assert expand("FREQ=WEEKLY;BYDAY=FR", "2011-12-23T08:30:00", "Pacific/Apia", 3) == [
        ("2011-12-23T08:30", "2011-12-23T18:30Z", "none"),
        ("2011-12-30T08:30", "2011-12-30T18:30Z", "gap_shifted_forward"),
        ("2012-01-06T08:30", "2012-01-05T18:30Z", "none"),
    ]


# --- rules ------------------------------------------------------------------------------------------


def test_last_weekday_of_the_month():
    rows = expand("FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1", "2027-01-01T17:00:00", "Europe/Berlin", 6)
    assert utc_only(rows) == [
        ("2027-01-29T17:00", "2027-01-29T16:00Z"),  # Fri (31st is a Sunday)
        ("2027-02-26T17:00", "2027-02-26T16:00Z"),  # Fri (28th is a Sunday)
        ("2027-03-31T17:00", "2027-03-31T15:00Z"),  # Wed, CEST
        ("2027-04-30T17:00", "2027-04-30T15:00Z"),  # Fri
        ("2027-05-31T17:00", "2027-05-31T15:00Z"),  # Mon
        ("2027-06-30T17:00", "2027-06-30T15:00Z"),  # Wed
    ]


@pytest.mark.parametrize(
    ("rule", "start"),
    [
        ("FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29", "2027-01-01T12:00:00"),
        ("FREQ=YEARLY", "2028-02-29T12:00:00"),  # the default BYMONTHDAY=29 from start skips 2029-2031
    ],
)
def test_every_feb_29_only_in_leap_years(rule, start):
    assert utc_only(expand(rule, start, "America/New_York", 3)) == [
        ("2028-02-29T12:00", "2028-02-29T17:00Z"),
        ("2032-02-29T12:00", "2032-02-29T17:00Z"),
        ("2036-02-29T12:00", "2036-02-29T17:00Z"),
    ]


def test_byday_with_ordinals():
    second_tuesday = expand("FREQ=MONTHLY;BYDAY=2TU", "2027-01-01T10:00:00", "Europe/Berlin", 4)
    assert utc_only(second_tuesday) == [
        ("2027-01-12T10:00", "2027-01-12T09:00Z"),
        ("2027-02-09T10:00", "2027-02-09T09:00Z"),
        ("2027-03-09T10:00", "2027-03-09T09:00Z"),
        ("2027-04-13T10:00", "2027-04-13T08:00Z"),
    ]
    last_friday = expand("FREQ=MONTHLY;BYDAY=-1FR", "2027-01-01T10:00:00", "Europe/Berlin", 4)
    assert utc_only(last_friday) == [
        ("2027-01-29T10:00", "2027-01-29T09:00Z"),
        ("2027-02-26T10:00", "2027-02-26T09:00Z"),
        ("2027-03-26T10:00", "2027-03-26T09:00Z"),
        ("2027-04-30T10:00", "2027-04-30T08:00Z"),
    ]


# RFC 5545 §3.8.5.3 examples (DTSTART;TZID=America/New_York), with the RFC's own listed dates.
@pytest.mark.parametrize(
    ("rule", "start", "expected"),
    [
        (
            "FREQ=WEEKLY;INTERVAL=2;COUNT=4;BYDAY=TU,SU;WKST=MO",
            "1997-08-05T09:00:00",
            [("1997-08-05T09:00", "1997-08-05T13:00Z"), ("1997-08-10T09:00", "1997-08-10T13:00Z"),
             ("1997-08-19T09:00", "1997-08-19T13:00Z"), ("1997-08-24T09:00", "1997-08-24T13:00Z")],
        ),
        (
            "FREQ=WEEKLY;INTERVAL=2;COUNT=4;BYDAY=TU,SU;WKST=SU",
            "1997-08-05T09:00:00",
            [("1997-08-05T09:00", "1997-08-05T13:00Z"), ("1997-08-17T09:00", "1997-08-17T13:00Z"),
             ("1997-08-19T09:00", "1997-08-19T13:00Z"), ("1997-08-31T09:00", "1997-08-31T13:00Z")],
        ),
        (
            "FREQ=MONTHLY;COUNT=3;BYDAY=TU,WE,TH;BYSETPOS=3",
            "1997-09-04T09:00:00",
            [("1997-09-04T09:00", "1997-09-04T13:00Z"), ("1997-10-07T09:00", "1997-10-07T13:00Z"),
             ("1997-11-06T09:00", "1997-11-06T14:00Z")],
        ),
        (
            "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-2",
            "1997-09-29T09:00:00",
            [("1997-09-29T09:00", "1997-09-29T13:00Z"), ("1997-10-30T09:00", "1997-10-30T14:00Z"),
             ("1997-11-27T09:00", "1997-11-27T14:00Z"), ("1997-12-30T09:00", "1997-12-30T14:00Z"),
             ("1998-01-29T09:00", "1998-01-29T14:00Z"), ("1998-02-26T09:00", "1998-02-26T14:00Z"),
             ("1998-03-30T09:00", "1998-03-30T14:00Z")],
        ),
        (
            "FREQ=MONTHLY;BYMONTHDAY=-3",
            "1997-09-28T09:00:00",
            [("1997-09-28T09:00", "1997-09-28T13:00Z"), ("1997-10-29T09:00", "1997-10-29T14:00Z"),
             ("1997-11-28T09:00", "1997-11-28T14:00Z"), ("1997-12-29T09:00", "1997-12-29T14:00Z"),
             ("1998-01-29T09:00", "1998-01-29T14:00Z"), ("1998-02-26T09:00", "1998-02-26T14:00Z")],
        ),
        (
            "FREQ=YEARLY;INTERVAL=4;BYMONTH=11;BYDAY=TU;BYMONTHDAY=2,3,4,5,6,7,8",
            "1996-11-05T09:00:00",
            [("1996-11-05T09:00", "1996-11-05T14:00Z"), ("2000-11-07T09:00", "2000-11-07T14:00Z"),
             ("2004-11-02T09:00", "2004-11-02T14:00Z")],
        ),
    ],
)  # fmt: skip
def test_rfc5545_examples(rule, start, expected):
    rows = utc_only(expand(rule, start, "America/New_York", 20))
    # A COUNT rule stops there; an open-ended one is compared on the RFC's listed prefix.
    assert (rows if "COUNT" in rule else rows[: len(expected)]) == expected


def test_count_interval_bymonth_and_exdate():
    assert [
        r[0] for r in expand("FREQ=DAILY;INTERVAL=10;COUNT=3", "2027-01-01T09:00:00", "Asia/Kolkata")
    ] == [
        "2027-01-01T09:00",
        "2027-01-11T09:00",
        "2027-01-21T09:00",
    ]
    rows = expand("FREQ=YEARLY;BYMONTH=1,7;BYMONTHDAY=1;COUNT=3", "2027-01-01T09:00:00", "Asia/Kolkata")
    assert utc_only(rows) == [
        ("2027-01-01T09:00", "2027-01-01T03:30Z"),
        ("2027-07-01T09:00", "2027-07-01T03:30Z"),
        ("2028-01-01T09:00", "2028-01-01T03:30Z"),
    ]
    # COUNT counts instances before exceptions are removed (RFC 5545): 3 instances, one excluded.
    rows = expand(
        "FREQ=DAILY;COUNT=3", "2027-01-01T08:30:00", "Europe/Berlin", exdate=["2027-01-02T08:30:00"]
    )
    assert [r[0] for r in rows] == ["2027-01-01T08:30", "2027-01-03T08:30"]


def test_until_is_an_instant_compared_after_resolution():
    # UNTIL 07:30Z is exactly 08:30 CET on 2027-01-03: included; the next day is not.
    rows = expand("FREQ=DAILY;UNTIL=20270103T073000Z", "2027-01-01T08:30:00", "Europe/Berlin")
    assert [r[0] for r in rows] == ["2027-01-01T08:30", "2027-01-02T08:30", "2027-01-03T08:30"]


# --- re-anchoring: the cursor and the preview restart the rule instead of replaying it -------------


def _random_rule(rng: random.Random) -> tuple[str, datetime]:
    freq = rng.choice(["YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY"])
    parts = [f"FREQ={freq}"]
    if rng.random() < 0.5:
        parts.append(f"INTERVAL={rng.choice([2, 3, 5, 7])}")
    if freq in ("YEARLY", "MONTHLY") and rng.random() < 0.5:
        parts.append(f"BYMONTHDAY={rng.choice(['1', '15', '-1', '31', '29,30'])}")
    if rng.random() < 0.5:
        days = rng.sample(["MO", "TU", "WE", "TH", "FR", "SA", "SU"], rng.randint(1, 3))
        if freq in ("YEARLY", "MONTHLY") and rng.random() < 0.3:
            days = [f"{rng.choice([1, 2, -1])}{d}" for d in days]
        parts.append("BYDAY=" + ",".join(days))
    if freq in ("YEARLY", "DAILY", "WEEKLY") and rng.random() < 0.3:
        parts.append("BYMONTH=" + ",".join(str(m) for m in sorted(rng.sample(range(1, 13), 3))))
    if freq in ("YEARLY", "MONTHLY", "WEEKLY", "DAILY") and rng.random() < 0.3:
        parts.append("BYHOUR=" + ",".join(str(h) for h in sorted(rng.sample(range(24), 2))))
    if any(p.startswith(("BYDAY", "BYMONTHDAY", "BYHOUR")) for p in parts) and rng.random() < 0.3:
        parts.append(f"BYSETPOS={rng.choice([1, -1, 2])}")
    if freq == "WEEKLY" and rng.random() < 0.5:
        parts.append("WKST=" + rng.choice(["MO", "SU", "WE"]))
    start = datetime(2020, 1, 1) + timedelta(minutes=rng.randrange(0, 3 * 365 * 24 * 60))
    return ";".join(parts), start.replace(second=0)


def test_restarting_the_rule_near_any_point_gives_exactly_the_full_expansion():
    """The cursor (an instance) and _anchor_before (a period boundary) must reproduce what iterating
    from DTSTART gives. The reference here is a plain dateutil rrule built from the text with DTSTART,
    i.e. the library's own defaults, against our explicit defaults and restart points."""
    rng = random.Random(5545)
    for _ in range(300):
        text, start = _random_rule(rng)
        rule = parse_rrule(text)
        # Sub-daily rules are checked over weeks, not years: the reference replays every instance.
        span_days = 7 if rule.freq >= du.HOURLY else 4 * 365
        target = start + timedelta(minutes=rng.randrange(0, span_days * 24 * 60))
        window_end = target + timedelta(days=min(120, span_days))
        try:
            reference = du.rrule(
                rule.freq,
                dtstart=start,
                interval=rule.interval,
                wkst=rule.wkst,
                until=window_end,
                **rule.kwargs,
            )
            rec = Recurrence(rule, start=start, tz_name="UTC")
        except (ValueError, RuleError):
            continue  # e.g. an unreachable BYHOUR for this start
        # The reference gets the same hard stop (a rule matching nothing would search to 9999).
        full = _iterate(_stop_at(reference, window_end))
        expected = [e for e in full if e >= target][:40]
        got = list(islice(rec.instances(target, until_local=window_end), 0, 40))
        assert got == expected, (text, start, target)
        if expected:
            restarted = list(islice(rec.instances(expected[0], until_local=window_end), 0, 40))
            assert restarted == expected, (text, start, "restart at an instance")


# --- bad input --------------------------------------------------------------------------------------


def build(rrule="FREQ=DAILY", start="2027-01-04T08:30:00", tz="Europe/Berlin", exdate=None, per_day=24):
    return recurrence_build(
        rrule=rrule,
        start=start,
        tz_name=tz,
        dst_policy=None,
        exdate=exdate,
        now=datetime(2027, 1, 1, tzinfo=UTC),
        max_per_day=per_day,
    )


@pytest.mark.parametrize(
    ("kwargs", "field", "says"),
    [
        ({"tz": "Mars/Olympus"}, "timezone", "unknown timezone"),
        ({"rrule": "FREQ=DAILY;BYMONTHDAY=32"}, "rrule", "BYMONTHDAY=32"),
        ({"rrule": "FREQ=FORTNIGHTLY"}, "rrule", "FREQ=FORTNIGHTLY"),
        ({"rrule": "BYDAY=MO"}, "rrule", "FREQ is required"),
        ({"rrule": "FREQ=DAILY;BYDAY=XX"}, "rrule", "BYDAY=XX"),
        ({"rrule": "FREQ=WEEKLY;BYDAY=2MO"}, "rrule", "BYDAY=2MO"),
        ({"rrule": "FREQ=MONTHLY;BYDAY=6MO"}, "rrule", "at most 5"),
        ({"rrule": "FREQ=DAILY;INTERVAL=0"}, "rrule", "INTERVAL=0"),
        ({"rrule": "FREQ=DAILY;COUNT=x"}, "rrule", "COUNT=X"),
        ({"rrule": "FREQ=DAILY;FREQ=WEEKLY"}, "rrule", "given twice"),
        ({"rrule": "FREQ=DAILY;COLOR=RED"}, "rrule", "COLOR: unknown rule part"),
        ({"rrule": "FREQ=DAILY;;BYHOUR=1"}, "rrule", "empty part"),
        ({"rrule": "FREQ=DAILY;BYHOUR"}, "rrule", "expected NAME=VALUE"),
        ({"rrule": "FREQ=WEEKLY;BYMONTHDAY=1"}, "rrule", "BYMONTHDAY cannot be used with FREQ=WEEKLY"),
        ({"rrule": "FREQ=DAILY;BYSETPOS=1"}, "rrule", "BYSETPOS needs another"),
        ({"rrule": "FREQ=DAILY;BYWEEKNO=1"}, "rrule", "BYWEEKNO can only"),
        ({"rrule": "FREQ=DAILY;COUNT=5;UNTIL=20270301T000000Z"}, "rrule", "COUNT and UNTIL"),
        ({"rrule": "FREQ=DAILY;UNTIL=20270301"}, "rrule", "is a date, but start is a date-time"),
        ({"rrule": "FREQ=DAILY;UNTIL=20270301T000000"}, "rrule", "floating local time"),
        ({"rrule": "FREQ=DAILY;UNTIL=20270231T000000Z"}, "rrule", "not a real date"),
        ({"rrule": "FREQ=DAILY;UNTIL=20260101T000000Z"}, "rrule", "before start"),
        ({"rrule": "DTSTART:20270101T000000\nRRULE:FREQ=DAILY"}, "rrule", "single RRULE line"),
        ({"rrule": "FREQ=SECONDLY"}, "rrule", "more than 24 times on one local day"),
        ({"rrule": "FREQ=MINUTELY;INTERVAL=30"}, "rrule", "more than 24 times"),
        ({"rrule": "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30"}, "rrule", "no occurrence"),
        ({"rrule": "FREQ=MONTHLY;BYDAY=MO;BYSETPOS=6"}, "rrule", "no occurrence"),
        ({"rrule": "FREQ=DAILY;COUNT=2", "start": "2020-01-01T08:00:00"}, "rrule", "no occurrence after now"),
        ({"start": "2027-01-04"}, "start", "date only"),
        ({"start": "2027-01-04T08:30:00+01:00"}, "start", "UTC offset"),
        ({"start": "tomorrow"}, "start", "not valid"),
        ({"exdate": ["2027-01-05T07:30:00Z"]}, "exdate", "has a UTC offset"),
        ({"exdate": ["2027-01-05T07:30:00"]}, "exdate", "occurrences that day: 08:30"),
        ({"exdate": ["not-a-date"]}, "exdate", "expected a date"),
        ({"rrule": "FREQ=WEEKLY;BYDAY=MO", "exdate": ["2027-01-05"]}, "exdate", "no occurrence that day"),
    ],
)
def test_bad_input_names_the_field_and_the_offending_part(kwargs, field, says):
    with pytest.raises(RuleError) as err:
        build(**kwargs)
    assert err.value.field == field
    assert says in str(err.value)


@pytest.mark.parametrize(
    "rule",
    [
        "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30",
        "FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=31",
        "FREQ=HOURLY;BYMONTH=4;BYMONTHDAY=31",
        "FREQ=DAILY;INTERVAL=7;BYDAY=MO;BYMONTHDAY=29;BYMONTH=2",
    ],
)
def test_an_impossible_rule_is_rejected_fast(rule):
    # dateutil alone would search such a rule day by day up to the year 9999 (seconds of CPU).
    started = time.perf_counter()
    with pytest.raises(RuleError, match="no occurrence"):
        build(rrule=rule)
    assert time.perf_counter() - started < 3.0  # milliseconds here; the day-by-day search takes far longer


def test_exdates_parse_local_days_and_times_and_compact_forms():
    times, days = parse_exdates(["2026-12-25", "20261231", "20270101T083000", "2027-01-02T08:30"], "UTC")
    assert {d.isoformat() for d in days} == {"2026-12-25", "2026-12-31"}
    assert {t.isoformat() for t in times} == {"2027-01-01T08:30:00", "2027-01-02T08:30:00"}


def test_canonical_text_keeps_the_rule():
    assert parse_rrule("rrule:freq=weekly;byday=mo,fr;until=20270630T215959Z").text == (
        "FREQ=WEEKLY;BYDAY=MO,FR;UNTIL=20270630T215959Z"
    )


@pytest.mark.parametrize(
    "digit", ["\u00b2", "\u0661", "\uff11", "\u0967"], ids=["sup", "arabic", "fullwidth", "deva"]
)
@pytest.mark.parametrize(
    "rule",
    [
        "FREQ=DAILY;INTERVAL={d}",
        "FREQ=DAILY;COUNT={d}",
        "FREQ=MONTHLY;BYMONTHDAY={d}",
        "FREQ=MONTHLY;BYDAY={d}MO",
        "FREQ=DAILY;BYHOUR={d}",
        "FREQ=DAILY;UNTIL=2027010{d}T000000Z",
    ],
)
def test_a_number_in_unicode_digits_is_a_rule_error_naming_the_part(rule, digit):
    # int() reads Arabic-Indic and full-width digits, and "²" passes str.isdigit() but not int() (a
    # ValueError, a 500 before): only ASCII digits are a number in a rule.
    text = rule.format(d=digit)
    with pytest.raises(RuleError) as refused:
        parse_rrule(text)
    assert text.split(";")[1].split("=")[0] in str(refused.value)
