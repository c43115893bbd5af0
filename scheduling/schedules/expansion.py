"""The bounds of every expansion of a rule: a hard stop and a budget of work per pass.

Every expansion has a hard stop (``_stop_at``): dateutil checks UNTIL only when a candidate matches, so
a rule that matches nothing ("FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30") would otherwise be searched day by
day up to the year 9999 (seconds of CPU per request). And every pass over a rule spends from a budget
(``expansion_budget``): a sub-daily rule whose filters leave few times a day is refused
(``ExpansionTooCostly``) before it can hold a process.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Literal, cast

from dateutil import rrule as du
from django.conf import settings

from scheduling.schedules.rrules import ParsedRule, RuleError


# --- the hard stop ------------------------------------------------------------------------------------
class _SearchExhausted(Exception):
    pass


_rebuild = du._iterinfo.rebuild


def _rebuild_with_stop(self, year, month):
    # dateutil rebuilds its per-month tables at least once per month of the search, whatever the
    # frequency, so this is where a search that finds nothing can be stopped. Only rules marked by
    # _stop_at are affected; any other rrule in the process behaves exactly as before.
    stop = getattr(self.rrule, "_smsgw_stop", None)
    if stop is not None and (year, month) > stop:
        raise _SearchExhausted
    return _rebuild(self, year, month)


# Patches dateutil's private per-month rebuild, which its stubs type as a plain method.
du._iterinfo.rebuild = _rebuild_with_stop  # type: ignore[method-assign]


def _stop_at(rule: du.rrule, last: datetime) -> du.rrule:
    # A YEARLY search rebuilds once per year with DTSTART's month, not the month it has reached, so
    # only the year can be compared there.
    # Our marker attribute and dateutil's private _freq are not in the stubs.
    rule._smsgw_stop = (last.year, 12 if rule._freq == du.YEARLY else last.month)  # type: ignore[attr-defined]
    rule._smsgw_cost_per_day = _cost_per_day(rule)  # type: ignore[attr-defined]
    rule._smsgw_budget = expansion_budget()  # type: ignore[attr-defined]
    return rule


# --- the work budget ----------------------------------------------------------------------------------
# A sub-daily rule with filters coarser than its frequency ("FREQ=SECONDLY;BYMONTH=2;BYHOUR=8") is walked
# by dateutil unit by unit inside each day it visits, and a day a filter rejects is skipped only to its
# end: up to 86,400 steps per day, about 6 ms, so a COUNT or an impossible combination searched over a
# century took minutes. Each pass over a rule is charged per day it visits (the units dateutil may walk
# that day) and per candidate period; past EXPANSION_BUDGET it stops with ExpansionTooCostly. Counted,
# not timed, so the answer does not depend on the machine's load.
EXPANSION_BUDGET = 50_000
# The validation walks a rule's densest days (Recurrence.densest_day: up to DENSEST_DAYS_SAMPLED days of
# up to SMSGW_SCHEDULE_MAX_PER_DAY instances each): an operator who allows more instances a day than the
# budget covers has allowed that much work, so the budget grows with the setting (unchanged at its
# default of 24 a day).
DENSEST_DAYS_SAMPLED = 3


def expansion_budget() -> int:
    """The steps one expansion may take: EXPANSION_BUDGET, or what the validation of a rule at the
    operator's per-day limit needs when that is more."""
    return max(EXPANSION_BUDGET, (DENSEST_DAYS_SAMPLED + 1) * settings.SCHEDULE_MAX_PER_DAY)


_UNITS_PER_DAY = {du.HOURLY: 24, du.MINUTELY: 24 * 60, du.SECONDLY: 24 * 3600}


class ExpansionTooCostly(RuleError):
    """The rule needs more than EXPANSION_BUDGET steps of work for one expansion."""

    def __init__(self) -> None:
        super().__init__(
            "rrule",
            "is too costly to expand: a sub-daily FREQ (HOURLY, MINUTELY, SECONDLY) combined with "
            "filters that leave few times per day (BYMONTH, BYMONTHDAY, BYYEARDAY, BYDAY, BYHOUR, "
            "BYMINUTE...) must be searched unit by unit; write it with a coarser FREQ (e.g. FREQ=DAILY "
            "with BYHOUR/BYMINUTE, or FREQ=YEARLY with BYMONTH) or a smaller COUNT",
        )


def _cost_per_day(rule: du.rrule) -> int:
    """What one visited day may cost: the units dateutil walks through a day when a time filter
    coarser than the frequency can reject them; 1 when every unit it walks is a candidate."""
    freq = rule._freq  # type: ignore[attr-defined]
    time_filtered = {
        du.HOURLY: rule._byhour,  # type: ignore[attr-defined]
        du.MINUTELY: rule._byhour or rule._byminute,  # type: ignore[attr-defined]
        du.SECONDLY: rule._byhour or rule._byminute or rule._bysecond,  # type: ignore[attr-defined]
    }.get(freq)
    if not time_filtered:
        return 1
    return -(-_UNITS_PER_DAY[freq] // rule._interval)  # type: ignore[attr-defined]


_IterinfoBase = du._iterinfo


class _BudgetedIterinfo(_IterinfoBase):
    # dateutil makes one _iterinfo per pass over a rule and asks it for each DAILY or sub-daily
    # candidate period (ddayset), so the pass's spending lives here. Only rules marked by _stop_at are
    # charged; any other rrule in the process behaves exactly as before.
    __slots__ = ("smsgw_day", "smsgw_spent")

    def __init__(self, rrule) -> None:
        for attr in _IterinfoBase.__slots__:
            setattr(self, attr, None)
        self.rrule = rrule
        self.smsgw_day: tuple[int, int, int] | None = None
        self.smsgw_spent = 0

    def ddayset(self, year, month, day):
        per_day = getattr(self.rrule, "_smsgw_cost_per_day", None)
        if per_day is not None:
            visited = (year, month, day)
            self.smsgw_spent += per_day if visited != self.smsgw_day else 1
            self.smsgw_day = visited
            if self.smsgw_spent > self.rrule._smsgw_budget:  # type: ignore[attr-defined]
                raise ExpansionTooCostly
        return super().ddayset(year, month, day)


# dateutil looks its _iterinfo class up by name at the start of every pass.
du._iterinfo = _BudgetedIterinfo  # type: ignore[misc]


def _frequency(rule: ParsedRule) -> Literal[0, 1, 2, 3, 4, 5, 6]:
    # ParsedRule.freq is one of dateutil's FREQ constants (rrules.FREQS), typed as a plain int.
    return cast("Literal[0, 1, 2, 3, 4, 5, 6]", rule.freq)


def _iterate(rule: du.rrule) -> Iterator[datetime]:
    try:
        yield from rule
    except _SearchExhausted:
        return
