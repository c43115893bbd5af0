"""The release gate's limits as shared database rows (``RateBucket``), one GCRA "theoretical arrival time"
each (delivery.flow.pacing says why rows, and how the gate and the late batches use them): a limit during
one pass (``Limit``), a tenant's line on it (``Line``), the rate's additive recovery after a throttle
(``recovered``), and the rows' locking and saving.
"""

from __future__ import annotations

import bisect
from datetime import UTC, datetime
from typing import overload

from django.conf import settings
from django.db import connection

from delivery.models import RateBucket
from smsgw.runtime.db import is_postgres

AIMD_KNEE = 0.9  # fast recovery up to this share of the rate last throttled at ...
AIMD_SLOW = 0.1  # ... and this share of its speed beyond
MIN_SPACING_SECONDS = 0.001  # a sender faster than 1,000 segments/s is not spaced out (see Limit.fit)
AT_ONCE_SECONDS = 0.01  # a start this close to now is "now": no slot, it goes as soon as a worker has it


def bucket_key(provider: str, account: str, kind: str, value: str = "") -> str:
    return f"{provider}|{account}|{kind}|{value}"[:200]


@overload
def epoch(value: datetime) -> float: ...
@overload
def epoch(value: datetime | None) -> float | None: ...
def epoch(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def from_epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


class Limit:
    """One limit during one pass, in epoch seconds (cheap arithmetic per candidate).

    ``tat`` is the GCRA "theoretical arrival time": the earliest start the limit allows next. A sender is
    *strict*: the provider counts its arrivals in any one-second window, so no two of its messages may
    start closer than their segments' worth of its interval; a message held back by another limit
    (its tenant's rate) leaves the time before it to the next ones (``busy``: this pass's slots). The
    account and a tenant are *budgets*: what was taken, counted from now, whatever the slots. ``vtat`` is
    the limit as projected for the messages that wait in this pass (their expected slots), never
    written back as capacity taken."""

    def __init__(self, row: RateBucket, configured: float, now: float, label: str, *, strict: bool) -> None:
        self.row = row
        self.label = label
        self.strict = strict
        self.configured = configured
        if row.last_decrease_at is None or row.rate_configured != configured:
            effective = configured  # never throttled (or reconfigured): the configured rate
        else:
            effective = recovered(row, configured, max(0.0, now - epoch(row.updated_at)))
        self.effective = max(effective, configured * settings.AIMD_FLOOR, 1e-6)
        self.interval = 1.0 / (self.effective * settings.PACING_HEADROOM)  # seconds per segment
        self.blocked = epoch(row.blocked_until) or 0.0
        self.free_from = max(epoch(row.tat), self.blocked)  # strict: nothing of earlier passes after it
        self.tat = self.free_from
        self.vtat = self.tat
        self.busy: list[tuple[float, float]] = []  # strict: this pass's slots, sorted

    def admit_at(self, now: float) -> float:
        """The earliest start this limit allows a message now (never before a Retry-After). For a strict
        limit, see ``fit``: a gap between this pass's slots may come earlier."""
        return max(now, self.tat, self.blocked)

    def fit(self, earliest: float, cost: int, now: float, origin: float) -> float:
        """Strict: the earliest start from ``earliest`` whose segments overlap none of this pass's. A
        message that can go at once starts now; one that waits for anything starts no earlier than
        ``origin``, when a released message can have reached the worker: a slot already past on arrival
        would crowd the next one."""
        # A sender of thousands of segments a second has no spacing that matters (and its tat only keeps
        # the last slot of earlier passes, which another limit may have pushed out of order).
        spaced = self.interval >= MIN_SPACING_SECONDS
        start = max(earliest, now, self.free_from) if spaced else max(earliest, now)
        start = self._gap(start, cost) if spaced else start
        if start > now + AT_ONCE_SECONDS:
            start = self._gap(max(start, origin), cost) if spaced else max(start, origin)
        return start

    def _gap(self, start: float, cost: int) -> float:
        length = cost * self.interval
        for begin, end in self.busy:
            if start + length <= begin + 1e-9:
                break
            if end > start:
                start = end
        return start

    def _occupy(self, begin: float, end: float) -> None:
        # Kept merged (touching slots are one segment), so a run of back-to-back slots, the usual case,
        # costs one step in ``fit`` however long it is.
        i = bisect.bisect_left(self.busy, (begin, end))
        if i > 0 and self.busy[i - 1][1] >= begin - 1e-9:
            i -= 1
            begin = self.busy[i][0]
            end = max(end, self.busy[i][1])
            del self.busy[i]
        while i < len(self.busy) and self.busy[i][0] <= end + 1e-9:
            end = max(end, self.busy[i][1])
            del self.busy[i]
        self.busy.insert(i, (begin, end))

    def projected_at(self, now: float) -> float:
        """The same for a message that waits: behind the ones projected before it in this pass."""
        return max(now, self.tat, self.vtat, self.blocked)

    def take(self, cost: int, start: float, now: float, origin: float, *, leaves_at: float = 0.0) -> None:
        """``leaves_at`` (strict): when the message is expected to leave, if later than ``start`` (one
        that goes at once leaves when a worker has it): the limit is taken up to its end."""
        if self.strict:
            end = max(start, leaves_at) + cost * self.interval
            self._occupy(start, end)
            self.tat = max(self.tat, end)
        else:
            # A budget counts from its own tat, not from a start another limit pushed further out. When
            # it is itself what makes messages wait, it follows their start up to the dispatch origin,
            # or its slots would bunch up there.
            base = max(self.tat, now)
            if base > now + AT_ONCE_SECONDS:
                base = max(base, min(start, origin))
            self.tat = base + cost * self.interval
        self.vtat = max(self.vtat, self.tat)

    def reserve(self, cost: int, slot: float, now: float) -> None:
        base = slot if self.strict else max(self.vtat, self.tat, now)
        self.vtat = base + cost * self.interval

    def save(self, now: datetime) -> None:
        row = self.row
        row.rate_configured = self.configured
        row.rate_effective = self.effective
        row.tat = from_epoch(self.tat)
        row.projected_until = from_epoch(max(self.tat, epoch(row.projected_until)))
        row.updated_at = now


def recovered(row: RateBucket, configured: float, elapsed: float) -> float:
    """Additive increase since the last pass: SMSGW_AIMD_INCREASE_PER_SECOND of the configured rate per
    second up to just below the rate the provider last throttled at, a tenth of that beyond (so the
    rate lingers where the real limit probably is, instead of overrunning it every few seconds), never
    above the configured rate."""
    fast = settings.AIMD_INCREASE_PER_SECOND * configured
    rate = row.rate_effective
    knee = AIMD_KNEE * (row.rate_ceiling or configured)
    if rate < knee and fast > 0:
        step = min(elapsed, (knee - rate) / fast)
        rate += fast * step
        elapsed -= step
    return min(configured, rate + fast * AIMD_SLOW * elapsed)


class Line:
    """A tenant's own line on a limit, per priority class (a sender, or its share of the account): the
    expected slots of its waiting messages at that limit's rate. It has no capacity of its own: it keeps
    a message seen for the first time behind the ones already promised a slot (which would otherwise
    slip, again and again), without pushing other tenants' or the other class's messages back."""

    def __init__(self, row: RateBucket, limit: Limit, now: float) -> None:
        self.row = row
        self.limit = limit
        self.cursor = max(epoch(row.projected_until), now)

    def follow(self, cost: int, start: float, now: float) -> None:
        """A first-time message released from this line: the next one goes after it, while the line
        still has promised slots ahead."""
        if self.cursor > now:
            self.cursor = max(self.cursor, start + cost * self.limit.interval)

    def project(self, cost: int, slot: float) -> None:
        self.cursor = max(self.cursor, slot + cost * self.limit.interval)

    def save(self, now: datetime) -> None:
        self.row.projected_until = from_epoch(self.cursor)
        self.row.updated_at = now


def rows_locked(keys: list[tuple[str, str, float]], now: datetime) -> dict[str, RateBucket]:
    """The bucket rows for ``(key, kind, rate)``, created when new, locked in key order (so two
    sweepers never wait on each other in a cycle)."""
    wanted = sorted({k for k, _, _ in keys})
    rows = {r.key: r for r in RateBucket.objects.select_for_update().filter(key__in=wanted).order_by("key")}
    missing = [(k, kind, rate) for k, kind, rate in keys if k not in rows]
    if missing:
        RateBucket.objects.bulk_create(
            [
                RateBucket(
                    key=k,
                    kind=kind,
                    rate_configured=rate,
                    rate_effective=rate,
                    tat=now,
                    projected_until=now,
                    updated_at=now,
                )
                for k, kind, rate in {m[0]: m for m in missing}.values()
            ],
            ignore_conflicts=True,
        )
        rows = {
            r.key: r for r in RateBucket.objects.select_for_update().filter(key__in=wanted).order_by("key")
        }
    return rows


def rows_save(rows: list[RateBucket]) -> None:
    """One UPDATE for a pass's buckets (Django's bulk_update builds a CASE per row per column: for 50
    senders it cost more than the rest of the pass)."""
    if not is_postgres():
        RateBucket.objects.bulk_update(
            rows, ["rate_configured", "rate_effective", "tat", "projected_until", "updated_at"]
        )
        return
    table = RateBucket._meta.db_table
    with connection.cursor() as cur:
        cur.execute(
            f'UPDATE "{table}" SET "rate_configured" = v.rc, "rate_effective" = v.re, "tat" = v.tat, '  # noqa: S608
            f'"projected_until" = v.pu, "updated_at" = v.ua FROM unnest(%s::bigint[], %s::float8[], '
            f"%s::float8[], %s::timestamptz[], %s::timestamptz[], %s::timestamptz[]) "
            f'AS v(id, rc, re, tat, pu, ua) WHERE "{table}"."id" = v.id',
            [
                [r.pk for r in rows],
                [r.rate_configured for r in rows],
                [r.rate_effective for r in rows],
                [r.tat for r in rows],
                [r.projected_until for r in rows],
                [r.updated_at for r in rows],
            ],
        )
