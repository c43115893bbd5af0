"""Expanding a schedule's rule in local wall time and resolving each occurrence to UTC (docs/scheduling.md).

Why local wall time: "every weekday at 08:30 Europe/Berlin" must stay 08:30 on both sides of a DST
change, so the rule is expanded on naive local datetimes (what the user means) and each occurrence is
resolved on its own (``timeutil.resolve_local``): a time in a spring-forward gap moves forward by the
gap, an ambiguous one takes the first (or, by request, the second) reading.

Two calendar edges need a decision of their own:

* A gap-shifted occurrence that lands exactly on another occurrence of the same rule (a daily 08:30 in
  Pacific/Apia, whose 2011-12-30 never existed, shifts onto 2011-12-31 08:30) is merged into it, so a
  recipient never gets two messages for one instant.
* RFC 5545 leaves a DTSTART that does not match the rule undefined; like python-dateutil we treat
  ``start`` as the anchor (phase, defaults) and it is an occurrence only when it matches the rule.

Occurrences come out in the order of their instants, which is not the order of their wall times: a
gap-shifted occurrence sorts with the instants just after the gap ("every 40 minutes" in London on
2027-03-28: 01:20 does not exist and is 01:20Z, after 02:00 BST = 01:00Z although its wall time comes
first). Only a gap shift breaks the wall-time order: the instances that can come before a gap-shifted
one lie at most its gap later in wall time, so ``occurrences`` holds it back only while the rule walks
that far (a heap, never more than one gap's worth of instances). Every wall time outside a gap, the
readings of a fold included, resolves in wall-time order under either DST policy, as long as two clock
changes of one zone are further apart than their sizes: in tzdata they are at least 96 times as far.

Expansion is re-anchorable: every BYxxx default that dateutil derives from DTSTART is made explicit,
COUNT is turned into the local time of the COUNT-th instance, and so the rule can restart at any
instance (the materializer's cursor) or at a period boundary (``_anchor_before``) without iterating
from DTSTART. A cursor step stays O(1) for a schedule that has run for years.

Every expansion is bounded (scheduling.schedules.expansion): a hard stop and a budget of work per pass.
"""

from __future__ import annotations

import contextlib
import heapq
from bisect import bisect_right
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from dateutil import rrule as du
from dateutil.relativedelta import relativedelta

from scheduling.schedules.expansion import (
    DENSEST_DAYS_SAMPLED,
    ExpansionTooCostly,
    _frequency,
    _iterate,
    _stop_at,
)
from scheduling.schedules.rrules import ParsedRule, RuleError, parse_exdates, parse_rrule, parse_start
from smsgw.values.timeutil import DstAdjustment, DstPolicy, ResolvedTime, TimeResolutionError, parse_timezone
from smsgw.values.timeutil import resolve_local as _resolve_local

__all__ = ["ExpansionTooCostly", "Occurrence", "Recurrence", "recurrence_build"]

# Longest a rule is ever expanded, from its start.
MAX_SPAN = relativedelta(years=100)
# How far after "now" the first occurrence may lie: 9 years covers "every Feb 29" across 2100.
FIRST_OCCURRENCE_SEARCH = relativedelta(years=9)
# No zone has moved its clock by more than a day at once (Apia 2011 and Kwajalein 1993 skipped one day,
# Alaska 1867 repeated about one); searches that must reach a wall time from an instant keep twice that.
CLOCK_JUMP_MARGIN = timedelta(days=2)
# UNTIL is an instant; the expansion runs on local times, so it runs a little past UNTIL's local
# reading and filters on the instant.
UNTIL_SLACK = CLOCK_JUMP_MARGIN


# --- occurrences --------------------------------------------------------------------------------------


class Occurrence:
    """One occurrence: the local wall time the rule produced and its resolution to UTC."""

    __slots__ = ("local", "resolved")

    def __init__(self, local: datetime, resolved: ResolvedTime) -> None:
        self.local = local  # naive wall time in the schedule's zone
        self.resolved = resolved

    @property
    def due_at(self) -> datetime:
        return self.resolved.due_at

    @property
    def adjustment(self) -> DstAdjustment:
        return self.resolved.adjustment

    def __repr__(self) -> str:
        return f"Occurrence({self.local.isoformat()} -> {self.due_at.isoformat()} {self.adjustment.value})"


def _explicit(rule: ParsedRule, start: datetime) -> dict:
    """The rule's dateutil arguments with every default dateutil would derive from DTSTART made explicit,
    so that restarting the rule at a later instance or period boundary cannot change what it means."""
    kwargs = dict(rule.kwargs)
    if not {"byweekno", "byyearday", "bymonthday", "byweekday"} & kwargs.keys():
        if rule.freq == du.YEARLY:
            kwargs.setdefault("bymonth", (start.month,))
            kwargs["bymonthday"] = (start.day,)
        elif rule.freq == du.MONTHLY:
            kwargs["bymonthday"] = (start.day,)
        elif rule.freq == du.WEEKLY:
            kwargs["byweekday"] = (start.weekday(),)
    if "byhour" not in kwargs and rule.freq < du.HOURLY:
        kwargs["byhour"] = (start.hour,)
    if "byminute" not in kwargs and rule.freq < du.MINUTELY:
        kwargs["byminute"] = (start.minute,)
    if "bysecond" not in kwargs and rule.freq < du.SECONDLY:
        kwargs["bysecond"] = (start.second,)
    return kwargs


class Recurrence:
    """A parsed rule bound to a start, a zone, a DST policy and its exceptions. Immutable; cheap to
    keep in a cache keyed by the schedule's definition."""

    def __init__(
        self,
        rule: ParsedRule,
        *,
        start: datetime,
        tz_name: str,
        dst_policy: DstPolicy | str = DstPolicy.EARLIER,
        exdates: frozenset[datetime] = frozenset(),
        exdays: frozenset[date] = frozenset(),
        last_local: datetime | None = None,
    ) -> None:
        self.rule = rule
        self.start = start
        self.tz_name = tz_name
        self.zone: ZoneInfo = parse_timezone(tz_name)
        self.dst_policy = DstPolicy(dst_policy or DstPolicy.EARLIER)
        self.exdates = exdates
        self.exdays = exdays
        bound = self._bound(rule, start)
        try:
            base = du.rrule(
                _frequency(rule),
                dtstart=start,
                interval=rule.interval,
                wkst=rule.wkst,
                **_explicit(rule, start),
            )
        except ValueError as exc:  # e.g. HOURLY;INTERVAL=5;BYHOUR=3 can never be reached from start
            raise RuleError("rrule", f"can never fire from this start: {exc}") from None
        if rule.count is not None:
            if last_local is None:
                last_local = self._count_last(base.replace(until=bound), bound, rule.count)
            if last_local is not None:
                bound = min(bound, last_local)
        self.last_local = last_local
        self.bound = bound
        self._rule = _stop_at(base.replace(until=bound), bound)

    def _bound(self, rule: ParsedRule, start: datetime) -> datetime:
        """The last local time the rule may reach: MAX_SPAN after the start, or UNTIL (with its slack)."""
        bound = start + MAX_SPAN
        if rule.until is not None:
            # UNTIL=99991231T235959Z ("forever") overflows here: start + MAX_SPAN bounds it anyway.
            with contextlib.suppress(OverflowError):
                bound = min(bound, rule.until.astimezone(self.zone).replace(tzinfo=None) + UNTIL_SLACK)
        return bound

    @staticmethod
    def _count_last(rule: du.rrule, bound: datetime, count: int) -> datetime | None:
        """The local time of the COUNT-th instance (exceptions included, as RFC 5545 counts them)."""
        last = None
        for i, instance in enumerate(_iterate(_stop_at(rule, bound)), start=1):
            last = instance
            if i == count:
                break
        return last

    @property
    def text(self) -> str:
        return self.rule.text

    def _from(self, anchor: datetime, until: datetime) -> du.rrule:
        # Valid only when ``anchor`` is an instance or a period boundary (see _anchor_before); the
        # property test in tests/scheduling/schedules/test_rrules.py checks both against a full expansion.
        if anchor <= self.start and until >= self.bound:
            return self._rule
        rule = self._rule.replace(dtstart=max(anchor, self.start), until=until)
        return _stop_at(rule, until)

    def _anchor_before(self, target: datetime) -> datetime:
        """A period boundary at or before ``target`` from which the rule's instances come out exactly:
        ``start`` moved forward by a whole number of INTERVAL periods, aligned to the period start
        (year, month, week by WKST, day, hour, minute). One period of margin is kept."""
        s, n = self.start, self.rule.interval
        if target <= s:
            return s
        freq = self.rule.freq
        if freq == du.YEARLY:
            k = ((target.year - s.year) // n - 1) * n
            return s if k <= 0 else datetime(s.year + k, 1, 1)
        if freq == du.MONTHLY:
            months = (target.year - s.year) * 12 + target.month - s.month
            k = (months // n - 1) * n
            return s if k <= 0 else datetime(s.year, s.month, 1) + relativedelta(months=k)
        if freq == du.WEEKLY:
            week0 = datetime.combine(s.date(), datetime.min.time()) - timedelta(
                days=(s.weekday() - self.rule.wkst) % 7
            )
            k = (((target - week0).days // 7) // n - 1) * n
            return s if k <= 0 else week0 + timedelta(weeks=k)
        if freq == du.DAILY:
            day0 = datetime.combine(s.date(), datetime.min.time())
            k = ((target - day0).days // n - 1) * n
            return s if k <= 0 else day0 + timedelta(days=k)
        if freq == du.HOURLY:
            base, unit = s.replace(minute=0, second=0), 3600
        elif freq == du.MINUTELY:
            base, unit = s.replace(second=0), 60
        else:
            base, unit = s, 1
        k = ((int((target - base).total_seconds()) // unit) // n - 1) * n
        return s if k <= 0 else base + timedelta(seconds=k * unit)

    def instances(
        self, from_local: datetime | None = None, *, until_local: datetime | None = None
    ) -> Iterator[datetime]:
        """Rule instances (exceptions not removed) at or after ``from_local``, in local order, none
        after ``until_local`` (a hard stop for the search, not only a filter)."""
        until = self.bound if until_local is None else min(until_local, self.bound)
        anchor = self.start if from_local is None else self._anchor_before(from_local)
        for instance in _iterate(self._from(anchor, until)):
            if from_local is None or instance >= from_local:
                yield instance

    def is_excluded(self, local: datetime) -> bool:
        return local in self.exdates or local.date() in self.exdays

    def resolve(self, local: datetime) -> ResolvedTime:
        # The common case first, exactly as timeutil.resolve_local decides it: a wall time whose two
        # readings (fold=0/1) agree exists once and needs no DST decision. Anything else goes to
        # resolve_local. Saves re-validating the zone name for every occurrence of a batch.
        offset = local.replace(tzinfo=self.zone).utcoffset()
        if offset is not None and offset == local.replace(tzinfo=self.zone, fold=1).utcoffset():
            return ResolvedTime(
                due_at=(local - offset).replace(tzinfo=UTC), local_time=local, timezone=self.tz_name
            )
        return _resolve_local(local, self.tz_name, self.dst_policy)

    def occurrences(
        self, from_local: datetime | None = None, *, until_local: datetime | None = None
    ) -> Iterator[Occurrence]:
        """Occurrences of the instances at or after ``from_local``, in the order of their instants:
        exceptions removed, UNTIL applied to the resolved instant, a gap-shifted occurrence that lands
        on another occurrence merged into it (module docstring). ``until_local`` as in ``instances``."""
        until = self.bound if until_local is None else min(until_local, self.bound)
        # Gap-shifted occurrences waiting for the instances that may still sort before them, by instant:
        # (instant, wall time, the last instance to wait for, occurrence).
        held: list[tuple[datetime, datetime, datetime, Occurrence]] = []
        ahead: list[datetime] = []  # instances after the current one that a look-ahead already walked
        for local in self.instances(from_local, until_local=until_local):
            del ahead[: bisect_right(ahead, local)]
            occ = self._occurrence(local)
            if occ is not None and occ.adjustment is DstAdjustment.GAP_SHIFTED:
                target = local + timedelta(seconds=occ.resolved.adjustment_seconds)
                wait_for = self._walk_ahead(ahead, local, min(target, until))
                heapq.heappush(held, (occ.due_at, local, wait_for, occ))
            elif occ is not None:
                while held and held[0][0] <= occ.due_at:
                    early = heapq.heappop(held)[3]
                    # The same instant: a gap-shifted occurrence landing on this one, merged into it.
                    if early.due_at < occ.due_at:
                        yield early
                yield occ
            while held and held[0][2] <= local:
                yield heapq.heappop(held)[3]
        while held:
            yield heapq.heappop(held)[3]

    def _occurrence(self, local: datetime) -> Occurrence | None:
        """The instance at ``local`` resolved, or None when it is excluded or past UNTIL."""
        if self.is_excluded(local):
            return None
        resolved = self.resolve(local)
        if self.rule.until is not None and resolved.due_at > self.rule.until:
            return None
        return Occurrence(local, resolved)

    def _walk_ahead(self, ahead: list[datetime], local: datetime, stop: datetime) -> datetime:
        """The last instance after ``local`` and no later than ``stop`` (``local`` itself when there
        is none). For a gap-shifted occurrence at ``local`` whose shift lands on ``stop`` these are the
        instances whose instants may come before its own; one at ``stop`` is the occurrence it merges
        into. ``ahead`` holds the instances already walked after ``local`` and is extended up to
        ``stop``, so the look-aheads of one gap's occurrences walk that gap once between them."""
        walked = ahead[-1] if ahead else local
        if walked < stop:
            ahead.extend(other for other in _iterate(self._from(walked, stop)) if other > walked)
        within = bisect_right(ahead, stop)
        return ahead[within - 1] if within else local

    def resume(self, local: datetime, instant: datetime) -> Iterator[Occurrence]:
        """Occurrences from the materializer's cursor, the first occurrence not made (its wall time
        and instant), in instant order: every one at or after ``instant``, the rule started early
        enough for a gap-shifted occurrence whose wall time comes before the cursor's. Offered too:
        the occurrences after the cursor's wall time whose instants come before it. A cursor saved in
        wall-time order (before occurrences came in instant order) had not made them; one saved since
        has, and their occurrence keys make them no-ops."""
        for occ in self.occurrences(min(local, self._earliest_local(instant))):
            if occ.due_at >= instant or occ.local > local:
                yield occ

    def _earliest_local(self, instant: datetime) -> datetime:
        """No later than the wall time of any occurrence at or after ``instant``: the lesser of its
        reading and its reading with the offset in force CLOCK_JUMP_MARGIN earlier. A gap-shifted
        occurrence keeps the wall time it had before its gap, and a gap that ended after ``instant``
        began less than a day before it (no gap is longer); tzdata's clock changes are at least three
        days apart, so the offset two days earlier is the one in force before that gap."""
        before = self.local_of(instant - CLOCK_JUMP_MARGIN) + CLOCK_JUMP_MARGIN
        return min(self.local_of(instant), before)

    def local_of(self, instant: datetime) -> datetime:
        return instant.astimezone(self.zone).replace(tzinfo=None)

    def after(
        self, instant: datetime, *, from_local: datetime | None = None, until_local: datetime | None = None
    ) -> Iterator[Occurrence]:
        """Occurrences whose resolved instant is after ``instant``, in instant order. The local search
        starts a margin earlier (a gap shift moves a wall time forward by up to a day, and with
        ``dst_policy: later`` an occurrence on a fold's second reading has an earlier wall time than an
        instant on its first), or at ``from_local``."""
        start = from_local or (self.local_of(instant) - CLOCK_JUMP_MARGIN)
        for occ in self.occurrences(start, until_local=until_local):
            if occ.due_at > instant:
                yield occ

    def first_after(self, instant: datetime) -> Occurrence | None:
        return next(self.after(instant), None)

    def densest_day(
        self,
        from_local: datetime,
        *,
        stop_above: int,
        until_local: datetime | None = None,
        days: int = DENSEST_DAYS_SAMPLED,
    ) -> int:
        """The most instances on one local day among the first ``days`` days that have any, from
        ``from_local``; stops early once a day exceeds ``stop_above``. A rule repeats its pattern from
        period to period, so its first busy days show the densest case."""
        counts: dict[date, int] = {}
        for local in self.instances(from_local, until_local=until_local):
            day = local.date()
            if day not in counts and len(counts) >= days:
                break
            counts[day] = counts.get(day, 0) + 1
            if counts[day] > stop_above:
                break
        return max(counts.values(), default=0)


def recurrence_build(
    *,
    rrule: str,
    start: str | datetime,
    tz_name: str,
    dst_policy: str | None,
    exdate=None,
    now: datetime,
    max_per_day: int,
) -> Recurrence:
    """Validate a whole timing definition and return its Recurrence.

    Raises RuleError naming the field: ``timezone`` (unknown zone), ``start``, ``rrule`` (syntax,
    combinations, COUNT with UNTIL, UNTIL type, more than ``max_per_day`` a day, no occurrence after
    ``now``), ``exdate`` (with an offset, or matching no occurrence), ``dst_policy``.
    """
    try:
        parse_timezone(tz_name)
    except TimeResolutionError as exc:
        raise RuleError("timezone", str(exc)) from exc
    try:
        policy = DstPolicy(dst_policy or DstPolicy.EARLIER)
    except ValueError:
        raise RuleError("dst_policy", "must be 'earlier' or 'later'") from None
    start_local = start if isinstance(start, datetime) else parse_start(start)
    rule = parse_rrule(rrule)
    exdates, exdays = parse_exdates(exdate, tz_name)
    if rule.until is not None:
        start_instant = _resolve_local(start_local, tz_name, policy).due_at
        if rule.until < start_instant:
            raise RuleError(
                "rrule", f"UNTIL={rule.parts['UNTIL']} is before start ({start_local.isoformat()} {tz_name})"
            )
    rec = Recurrence(
        rule, start=start_local, tz_name=tz_name, dst_policy=policy, exdates=exdates, exdays=exdays
    )
    # Both searches stop at a hard local bound: an impossible rule must fail fast.
    sample_from = max(start_local, rec.local_of(now))
    search_until = sample_from + FIRST_OCCURRENCE_SEARCH
    if rec.densest_day(sample_from, stop_above=max_per_day, until_local=search_until) > max_per_day:
        raise RuleError(
            "rrule", f"fires more than {max_per_day} times on one local day; the limit is {max_per_day}"
        )
    if next(rec.after(now, until_local=search_until), None) is None:
        why = " (every remaining occurrence is excluded by exdate)" if exdates or exdays else ""
        raise RuleError("rrule", f"produces no occurrence after now{why}")
    _check_exdates(rec)
    return rec


def _check_exdates(rec: Recurrence) -> None:
    """Each exception must match an instance of the rule: an EXDATE of 07:30 for a rule that fires at
    08:30 is almost always a time given in the wrong zone, and silently excluding nothing hides it."""
    for value in sorted(rec.exdates):
        if next(rec.instances(value, until_local=value), None) != value:
            same_day = [i.strftime("%H:%M:%S").removesuffix(":00") for i in _day_instances(rec, value.date())]
            hint = f"; occurrences that day: {', '.join(same_day)}" if same_day else ""
            raise RuleError(
                "exdate", f"{value.isoformat()} is not an occurrence of the rule in {rec.tz_name}{hint}"
            )
    for day in sorted(rec.exdays):
        if not _day_instances(rec, day):
            raise RuleError(
                "exdate", f"{day.isoformat()}: the rule has no occurrence that day in {rec.tz_name}"
            )


def _day_instances(rec: Recurrence, day: date) -> list[datetime]:
    begin = datetime.combine(day, datetime.min.time())
    return list(rec.instances(begin, until_local=begin + timedelta(days=1) - timedelta(seconds=1)))
