"""The expansion work budget (scheduling.schedules.recurrence): a sub-daily rule whose filters leave few
times per day is refused naming ``rrule``, counted rather than timed, and a cheap rule is untouched."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from scheduling.schedules.recurrence import ExpansionTooCostly, recurrence_build
from scheduling.schedules.rrules import RuleError

NOW = datetime(2026, 3, 1, tzinfo=UTC)

# The rules: each walked dateutil unit by unit through a century (minutes of CPU before).
COSTLY = [
    "FREQ=SECONDLY;BYMONTH=2;BYHOUR=8;BYMINUTE=0;BYSECOND=0;COUNT=10000",
    "FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=30;BYHOUR=8;BYMINUTE=0;BYSECOND=0",
    "FREQ=SECONDLY;INTERVAL=7;BYHOUR=3;BYMINUTE=0;BYSECOND=0",
    "FREQ=MINUTELY;BYMONTH=2;BYHOUR=8;BYMINUTE=0;COUNT=10000",
    "FREQ=MINUTELY;BYMONTH=2,4,6;BYMONTHDAY=31;BYHOUR=3",
    "FREQ=HOURLY;BYHOUR=9;COUNT=10000",
]


def build(rule: str, max_per_day: int = 24):
    return recurrence_build(
        rrule=rule,
        start="2026-03-02T08:00:00",
        tz_name="Europe/Berlin",
        dst_policy=None,
        now=NOW,
        max_per_day=max_per_day,
    )


@pytest.mark.parametrize("rule", COSTLY)
def test_a_costly_sub_daily_rule_is_refused_naming_rrule_in_well_under_a_second(rule):
    # This process's CPU, not the wall clock (which counts what other processes take on a loaded machine).
    started = time.process_time()
    with pytest.raises(ExpansionTooCostly) as caught:
        build(rule)
    assert time.process_time() - started < 1.0
    assert caught.value.field == "rrule" and "too costly" in str(caught.value)
    assert isinstance(caught.value, RuleError)  # every caller's RuleError path answers 400


@pytest.mark.parametrize(
    "rule",
    [
        "FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=30",  # impossible, but no time filter: one step per day
        "FREQ=HOURLY;BYMONTH=2;BYMONTHDAY=30",
        "FREQ=MINUTELY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO;COUNT=10000",
    ],
)
def test_an_impossible_sub_daily_rule_without_time_filters_still_gets_its_usual_answer(rule):
    # Bounded work, read as this process's CPU (about 0.15 s for the MINUTELY rule): a wall clock would
    # also count the time other processes of a loaded machine take.
    started = time.process_time()
    with pytest.raises(RuleError) as caught:
        build(rule)
    assert time.process_time() - started < 1.0
    assert not isinstance(caught.value, ExpansionTooCostly)
    assert "no occurrence after now" in str(caught.value)


@pytest.mark.parametrize(
    ("rule", "first_three"),
    [
        ("FREQ=MINUTELY;INTERVAL=15;BYHOUR=9,10;BYDAY=MO,TU,WE,TH,FR", ["09:00", "09:15", "09:30"]),
        ("FREQ=HOURLY;BYHOUR=9,17;BYDAY=MO,TU,WE,TH,FR;COUNT=500", ["09:00", "17:00", "09:00"]),
        ("FREQ=DAILY;BYHOUR=8;BYMINUTE=0;COUNT=10000", ["08:00", "08:00", "08:00"]),
        ("FREQ=MINUTELY;INTERVAL=60;COUNT=50", ["08:00", "09:00", "10:00"]),
    ],
)
def test_ordinary_rules_stay_within_the_budget(rule, first_three):
    rec = build(rule)
    times = [o.local.strftime("%H:%M") for o, _ in zip(rec.occurrences(), range(3), strict=False)]
    assert times == first_three
    # A long preview of the same rule is within the budget too.
    assert sum(1 for _ in zip(rec.occurrences(), range(1000), strict=False)) > 0


def test_a_dense_rule_the_operator_allows_a_day_is_within_the_budget_it_grows_to(settings):
    # Every 3 s is 28,800 a day: validating it walks its densest days (3 of them, 86,400 instances),
    # past the default budget, but an operator who allows that many a day allowed that work.
    settings.SCHEDULE_MAX_PER_DAY = 100_000
    rec = build("FREQ=SECONDLY;INTERVAL=3", max_per_day=100_000)
    times = [o.local.strftime("%H:%M:%S") for o, _ in zip(rec.occurrences(), range(3), strict=False)]
    assert times == ["08:00:00", "08:00:03", "08:00:06"]
    # The costly rules stay refused at that setting, still in well under a second.
    started = time.process_time()
    with pytest.raises(ExpansionTooCostly):
        build(COSTLY[0], max_per_day=100_000)
    assert time.process_time() - started < 1.0
