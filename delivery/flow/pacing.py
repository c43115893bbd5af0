"""The release gate: which due messages may go to the provider now, and where the rest wait.

The sweep hands the gate the messages it has claimed as due (locked, still ``scheduled`` or ``queued``);
the gate answers which to release now and, for the others, until when they wait. A message that waits is
still ours: it stays in its status, cancellable, with ``run_after`` at its expected send time, reason
``paced`` (or ``provider_unavailable``) and one timeline entry saying so. Nothing is claimed and then
held in a worker, and nothing waits in the provider's queue where it could no longer be cancelled.

Limits, all in segments per second (a 3-segment SMS costs 3), each a shared ``RateBucket`` row:

* the provider account's cap (``AccountCapacity`` or SMSGW_ACCOUNT_RATE);
* each sender's rate (``SenderCapacity`` or the default for its type, delivery.flow.capacity);
* the tenant's ``send_rate_per_second``, when set.

Why rows in the database (GCRA: one "theoretical arrival time" per limit) rather than token buckets in
Redis: the database is the one component every mode has (SQLite in the embedded mode, PostgreSQL in
production, with Redis or RabbitMQ as the broker, or neither), the claim already runs in a database
transaction, and locking the few bucket rows of a pass (SELECT ... FOR UPDATE, in key order) makes any
number of sweepers on any number of hosts share each limit exactly. The cost is one small locked read and
write per pass, not per message.

Fairness: within a priority class, candidates are taken round-robin by tenant (deficit round robin with
equal weights), so a tenant's backlog takes its turn instead of the whole capacity; transactional goes
first, but bulk keeps at least SMSGW_PACING_BULK_MIN_SHARE of each pass.

Expected send times: a message that does not fit is parked at its projected slot: behind its sender's
earlier paced messages and behind its own tenant's (per-tenant cursors, so one tenant's backlog never
pushes another tenant's messages back). The projection is a promise of order, not of capacity: when the
time comes the message competes again, and if it slips it is parked at the front of the line, with no new
timeline entry.

Late batches (``late_reslot``): a send worker that has a released batch after some of its slots passed
(the broker or a busy process held it) does not send those messages together with the sender's next
ones, which other workers have on time: it takes new slots for them at the end of each sender's line in
the same bucket rows, which move past them. The missed slots are lost capacity, not a burst.

Backpressure (``throttle_signal``): a 429 or a full provider queue lowers the rate of the scope the
error names (sender or account) by SMSGW_AIMD_DECREASE, at most once per cooldown, and honours
Retry-After; the rate climbs back by SMSGW_AIMD_INCREASE_PER_SECOND of the configured rate per second,
never above it (AIMD).
"""

from __future__ import annotations

import bisect
import logging
from collections import OrderedDict, deque
from datetime import UTC, datetime, timedelta
from typing import overload

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from delivery.flow import capacity, circuit
from delivery.models import RateBucket
from delivery.outcomes import delays
from delivery.providers import get_adapter
from delivery.routing import failover
from scheduling.dispatch.release import Candidate, Decision, Park
from scheduling.lifecycle.reasons import ReasonCode
from smsgw.models import Tenant
from smsgw.runtime.db import is_postgres

log = logging.getLogger(__name__)

REASON_PACED = ReasonCode.PACED
REASON_UNAVAILABLE = circuit.REASON_UNAVAILABLE
REASON_PROBE = circuit.REASON_PROBE
TRANSACTIONAL = "transactional"
AIMD_KNEE = 0.9  # fast recovery up to this share of the rate last throttled at ...
AIMD_SLOW = 0.1  # ... and this share of its speed beyond
MIN_PARK_SECONDS = 0.05  # never park a message for less: it would only come straight back
MIN_SPACING_SECONDS = 0.001  # a sender faster than 1,000 segments/s is not spaced out (see _Limit.fit)
AT_ONCE_SECONDS = 0.01  # a start this close to now is "now": no slot, it goes as soon as a worker has it


def bucket_key(provider: str, account: str, kind: str, value: str = "") -> str:
    return f"{provider}|{account}|{kind}|{value}"[:200]


@overload
def _epoch(value: datetime) -> float: ...
@overload
def _epoch(value: datetime | None) -> float | None: ...
def _epoch(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def _dt(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


class _Limit:
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
            effective = _recovered(row, configured, max(0.0, now - _epoch(row.updated_at)))
        self.effective = max(effective, configured * settings.AIMD_FLOOR, 1e-6)
        self.interval = 1.0 / (self.effective * settings.PACING_HEADROOM)  # seconds per segment
        self.blocked = _epoch(row.blocked_until) or 0.0
        self.free_from = max(_epoch(row.tat), self.blocked)  # strict: nothing of earlier passes after it
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
        row.tat = _dt(self.tat)
        row.projected_until = _dt(max(self.tat, _epoch(row.projected_until)))
        row.updated_at = now


def _recovered(row: RateBucket, configured: float, elapsed: float) -> float:
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


class _Line:
    """A tenant's own line on a limit, per priority class (a sender, or its share of the account): the
    expected slots of its waiting messages at that limit's rate. It has no capacity of its own: it keeps
    a message seen for the first time behind the ones already promised a slot (which would otherwise
    slip, again and again), without pushing other tenants' or the other class's messages back."""

    def __init__(self, row: RateBucket, limit: _Limit, now: float) -> None:
        self.row = row
        self.limit = limit
        self.cursor = max(_epoch(row.projected_until), now)

    def follow(self, cost: int, start: float, now: float) -> None:
        """A first-time message released from this line: the next one goes after it, while the line
        still has promised slots ahead."""
        if self.cursor > now:
            self.cursor = max(self.cursor, start + cost * self.limit.interval)

    def project(self, cost: int, slot: float) -> None:
        self.cursor = max(self.cursor, slot + cost * self.limit.interval)

    def save(self, now: datetime) -> None:
        self.row.projected_until = _dt(self.cursor)
        self.row.updated_at = now


def _rows(keys: list[tuple[str, str, float]], now: datetime) -> dict[str, RateBucket]:
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


def fair_order(candidates: list[Candidate]) -> list[Candidate]:
    """Transactional before bulk (bulk keeps its minimum share); round-robin by tenant within a class;
    each tenant's own candidates oldest first."""
    classes: dict[bool, OrderedDict[int, deque[Candidate]]] = {True: OrderedDict(), False: OrderedDict()}
    for c in sorted(candidates, key=lambda c: (c.run_after, c.id)):
        classes[c.priority == TRANSACTIONAL].setdefault(c.tenant_id, deque()).append(c)

    def round_robin(queues: OrderedDict[int, deque[Candidate]]):
        while queues:
            for tenant in list(queues):
                queue = queues[tenant]
                yield queue.popleft()
                if not queue:
                    del queues[tenant]

    tx, bulk = round_robin(classes[True]), round_robin(classes[False])
    out: list[Candidate] = []
    credit = 0.0
    share = settings.PACING_BULK_MIN_SHARE
    tx_next, bulk_next = next(tx, None), next(bulk, None)
    while tx_next is not None or bulk_next is not None:
        credit += share
        if bulk_next is not None and (tx_next is None or credit >= 1.0):
            out.append(bulk_next)
            bulk_next = next(bulk, None)
            credit = max(0.0, credit - 1.0)
        elif tx_next is not None:
            out.append(tx_next)
            tx_next = next(tx, None)
    return out


def release_gate(candidates: list[Candidate], now: datetime | None = None) -> Decision:
    """Decide a pass's candidates (called inside the sweep's transaction, rows locked). Each message is
    paced against the limits and circuit of its own provider account (``message.provider``)."""
    decision = Decision()
    if not candidates:
        return decision
    now = now or timezone.now()
    by_provider: dict[str, list[Candidate]] = {}
    for c in candidates:
        by_provider.setdefault(c.provider or settings.SMSGW_PROVIDER, []).append(c)
    for provider, group in sorted(by_provider.items()):
        _account_gate(provider, get_adapter(provider).account, group, now, decision)
    return decision


def _account_gate(  # noqa: C901, PLR0915
    provider: str, account: str, candidates: list[Candidate], now: datetime, decision: Decision
) -> None:
    now_s = now.timestamp()
    ordered = fair_order(candidates)

    state = circuit.circuit_state(provider, account)
    if state.is_open:  # nothing goes but the probe, which circuit_tick sends from the waiting messages
        # A message whose route has another leg moves to it (delivery.routing.failover); the rest wait.
        moved = failover.circuit_failover([c.id for c in ordered], provider, state.opened_at, now)
        ordered = [c for c in ordered if c.id not in moved]
        until = now + timedelta(seconds=delays.circuit_park_delay())
        text = f"provider unavailable (circuit open since {state.opened_at:%H:%M:%S} UTC); waiting"
        for c in ordered:
            park = Park(until, REASON_UNAVAILABLE, text, "provider_unavailable", {"circuit": "open"})
            decision.park.append((c, park))
        return

    senders = sorted({c.sender for c in ordered})
    sender_rates = capacity.sender_rates(provider, account, senders)
    account_rate = capacity.account_rate(provider, account).segments_per_second
    tenant_ids = sorted({c.tenant_id for c in ordered})
    tenant_rates = {
        tid: float(rate)
        for tid, rate in Tenant.objects.filter(pk__in=tenant_ids, send_rate_per_second__gt=0).values_list(
            "pk", "send_rate_per_second"
        )
    }
    # Lines are per tenant and priority class: a tenant's transactional message never waits behind that
    # same tenant's bulk backlog.
    classes = sorted({(c.tenant_id, c.priority) for c in ordered})
    pairs = sorted({(c.sender, c.tenant_id, c.priority) for c in ordered})

    def key(kind: str, value: str = "") -> str:
        return bucket_key(provider, account, kind, value)

    keys = [
        (key("account"), "account", account_rate),
        (key("account", TRANSACTIONAL), "account", account_rate),
    ]
    keys += [(key("sender", s), "sender", sender_rates[s].segments_per_second) for s in senders]
    keys += [(key("tenant", str(t)), "tenant", r) for t, r in tenant_rates.items()]
    keys += [(key("share", f"{t}|{p}"), "share", account_rate) for t, p in classes]
    keys += [(key("tline", f"{t}|{p}"), "line", tenant_rates[t]) for t, p in classes if t in tenant_rates]
    keys += [(key("line", f"{s}|{t}|{p}"), "line", sender_rates[s].segments_per_second) for s, t, p in pairs]
    rows = _rows(keys, now)
    account_limit = _Limit(rows[key("account")], account_rate, now_s, "account", strict=False)
    account_tx = _Limit(rows[key("account", TRANSACTIONAL)], account_rate, now_s, "account", strict=False)
    sender_limits = {
        s: _Limit(rows[key("sender", s)], sender_rates[s].segments_per_second, now_s, "sender", strict=True)
        for s in senders
    }
    tenant_limits = {
        t: _Limit(rows[key("tenant", str(t))], r, now_s, "tenant", strict=False)
        for t, r in tenant_rates.items()
    }
    shares = {(t, p): _Line(rows[key("share", f"{t}|{p}")], account_limit, now_s) for t, p in classes}
    sender_lines = {
        (s, t, p): _Line(rows[key("line", f"{s}|{t}|{p}")], sender_limits[s], now_s) for s, t, p in pairs
    }
    tenant_lines = {
        (t, p): _Line(rows[key("tline", f"{t}|{p}")], tenant_limits[t], now_s)
        for t, p in classes
        if t in tenant_limits
    }
    ahead = settings.PACING_RELEASE_AHEAD_SECONDS
    origin = now_s + settings.PACING_DISPATCH_SECONDS

    for c in ordered:
        cost = max(1, int(c.segments or 1))
        limits = [account_limit, sender_limits[c.sender]]
        lines = [sender_lines[(c.sender, c.tenant_id, c.priority)], shares[(c.tenant_id, c.priority)]]
        if c.tenant_id in tenant_limits:
            limits.append(tenant_limits[c.tenant_id])
            lines.append(tenant_lines[(c.tenant_id, c.priority)])
        # A message seen for the first time queues behind its lines' promised slots; one whose slot has
        # come (reason ``paced``) is the front of its lines and goes as soon as the limits allow.
        first = c.reason_code != REASON_PACED
        sender = sender_limits[c.sender]
        # Transactional keeps precedence over bulk already released on the account: it is held to the
        # account's rate by a budget of its own (account_tx), not by the account's whole budget; it is
        # still counted there, so the bulk that follows moves back.
        budgets = [account_tx if c.priority == TRANSACTIONAL else account_limit]
        budgets += [limit for limit in limits if limit is not sender and limit is not account_limit]
        start = max(limit.admit_at(now_s) for limit in budgets)
        if first:
            start = max(start, *(line.cursor for line in lines))
        start = sender.fit(start, cost, now_s, origin)
        if start < now_s + ahead - 1e-6:  # (float sums of intervals land a hair under a boundary)
            # Released with its slot: submitted at that instant (the worker's event loop waits for it),
            # so the provider sees the spacing, whatever the sweep's own cadence. One that can go at once
            # has no slot.
            at_once = start <= now_s + AT_ONCE_SECONDS
            for limit in limits:
                # A message that goes at once leaves when a worker has it, about ``origin``, not now: its
                # sender's next slot is counted from there, or in a burst the first message of each
                # sender would reach the provider together with the next ones (one over the rate).
                leaves = origin if at_once and limit is sender else start
                limit.take(cost, start, now_s, origin, leaves_at=leaves)
            if c.priority == TRANSACTIONAL:
                account_tx.take(cost, start, now_s, origin)
            if first:
                for line in lines:
                    line.follow(cost, start, now_s)
            decision.release.append(c)
            if not at_once:
                decision.not_before[c.id] = start
            continue
        # It waits, in our store: its expected slot is behind this pass's earlier projections, and it
        # comes back just in time to be released for that slot.
        slot = max(limit.projected_at(now_s) for limit in limits)
        if first:
            slot = max(slot, *(line.cursor for line in lines))
        for limit in limits:
            limit.reserve(cost, slot, now_s)
        for line in lines:
            line.project(cost, slot)
        binding = max(limits, key=lambda limit: limit.projected_at(now_s))
        limited_by = f"sender {c.sender}" if binding.label == "sender" else binding.label
        rate = binding.effective * settings.PACING_HEADROOM
        # It waits until its slot (run_after = the expected send time the API shows); the sweep claims a
        # paced message a little ahead of it (SMSGW_PACING_RELEASE_AHEAD_SECONDS), to release it in time.
        until = _dt(max(slot, now_s + MIN_PARK_SECONDS))
        decision.park.append(
            (
                c,
                Park(
                    until,
                    REASON_PACED,
                    f"paced: {limited_by} at {rate:.3g} segments/s; expected at {until:%H:%M:%S} UTC"[:255],
                    "paced",
                    {"limited_by": limited_by, "segments_per_second": rate},
                ),
            )
        )

    limit_rows = [account_limit, account_tx, *sender_limits.values(), *tenant_limits.values()]
    line_rows = [*shares.values(), *sender_lines.values(), *tenant_lines.values()]
    items: list[_Limit | _Line] = [*limit_rows, *line_rows]
    for item in items:
        item.save(now)
    _rows_save(list({id(i.row): i.row for i in items}.values()))


def _rows_save(rows: list[RateBucket]) -> None:
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


def late_reslot(
    provider: str, account: str, late: list[tuple[int, str, int]], *, horizon: float, lead: float = 0.0
) -> dict[int, float]:
    """New slots for released messages whose slots passed before a send worker had them (``late``: id,
    sender, segments, in slot order). Each goes after everything already released for its sender, spaced
    by the sender's interval, and the sender's shared ``tat`` moves past them in the same transaction: the
    sender's later batches, released to other workers on time, are then not sent together with these
    (shifted only in the worker, they were: the bucket did not know). The slots they missed are lost
    capacity; never exceeding the limit matters more. Only the sender limits (strict) move: the account's
    and a tenant's budgets already counted these messages. A sender fast enough to need no spacing, or
    without a bucket row, is left out of the answer (the caller sends those as they are). ``horizon``:
    a sender whose line would start more than that many seconds from now is left out too (a wrong tat
    never parks a worker); its line is never cut short, which would hand out slots already released.
    ``lead``: no new slot sooner than that many seconds from now (the time for the answer to reach
    whoever waits for it: a slot already past on arrival would be missed again).

    Rows locked in key order, as the release gate locks them (``_rows``), so a gate pass and any number
    of late batches take disjoint slots."""
    by_sender: dict[str, list[tuple[int, int]]] = {}
    for mid, sender, cost in late:
        by_sender.setdefault(sender, []).append((mid, max(1, int(cost or 1))))
    keys = {bucket_key(provider, account, "sender", s): s for s in by_sender}
    out: dict[int, float] = {}
    with transaction.atomic():
        rows = list(RateBucket.objects.select_for_update().filter(key__in=sorted(keys)).order_by("key"))
        now = timezone.now()  # after the lock: another late batch or a gate pass may have held it
        now_s = now.timestamp()
        saved: list[RateBucket] = []
        for row in rows:
            limit = _Limit(row, row.rate_configured, now_s, "sender", strict=True)
            if limit.interval < MIN_SPACING_SECONDS:
                continue
            start = max(limit.free_from, now_s + lead)
            if start > now_s + horizon:
                continue
            for mid, cost in by_sender[keys[row.key]]:
                out[mid] = start
                start += cost * limit.interval
            limit.tat = max(limit.tat, start)
            limit.save(now)
            saved.append(row)
        if saved:
            _rows_save(saved)
    return out


def throttle_signal(
    *,
    provider: str,
    account: str,
    scope: str,
    value: str,
    retry_after: float | None,
    now: datetime | None = None,
) -> None:
    """The provider said "too fast" for a sender (its queue is full) or the account (429): lower that
    bucket's rate for every worker and sweeper at once (multiplicative decrease, at most once per
    cooldown so one burst of refusals is one signal), and honour Retry-After."""
    now = now or timezone.now()
    kind = "sender" if scope == "sender" else "account"
    keys = [bucket_key(provider, account, kind, value if kind == "sender" else "")]
    if kind == "account":  # the account's budget for transactional is the same account's rate
        keys.append(bucket_key(provider, account, "account", TRANSACTIONAL))
    cooldown = now - timedelta(seconds=settings.AIMD_COOLDOWN_SECONDS)
    with transaction.atomic():
        decreased = (
            RateBucket.objects.filter(key__in=keys)
            .exclude(last_decrease_at__gt=cooldown)
            .update(
                rate_ceiling=F("rate_effective"),
                rate_effective=Greatest(
                    F("rate_effective") * settings.AIMD_DECREASE, F("rate_configured") * settings.AIMD_FLOOR
                ),
                last_decrease_at=now,
                throttles=F("throttles") + 1,
            )
        )
        if retry_after:
            until = now + timedelta(seconds=retry_after)
            RateBucket.objects.filter(key__in=keys).exclude(blocked_until__gt=until).update(
                blocked_until=until
            )
    if decreased:
        log.warning("provider throttled %s %s: rate lowered", kind, "(account)" if kind == "account" else "")
