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
write per pass, not per message. The rows and the arithmetic on them are delivery.flow.buckets.

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

import logging
from collections import OrderedDict, deque
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from delivery.flow import capacity, circuit
from delivery.flow.buckets import (
    AT_ONCE_SECONDS,
    MIN_SPACING_SECONDS,
    Limit,
    Line,
    bucket_key,
    from_epoch,
    rows_locked,
    rows_save,
)
from delivery.models import RateBucket
from delivery.outcomes import delays
from delivery.providers import get_adapter
from delivery.routing import failover
from scheduling.lifecycle.reasons import ReasonCode
from smsgw.models import Tenant
from smsgw.stages import Candidate, Decision, Park

log = logging.getLogger(__name__)

REASON_PACED = ReasonCode.PACED
REASON_UNAVAILABLE = circuit.REASON_UNAVAILABLE
REASON_PROBE = circuit.REASON_PROBE
TRANSACTIONAL = "transactional"
MIN_PARK_SECONDS = 0.05  # never park a message for less: it would only come straight back


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


def _account_gate(
    provider: str, account: str, candidates: list[Candidate], now: datetime, decision: Decision
) -> None:
    ordered = fair_order(candidates)
    state = circuit.circuit_state(provider, account)
    if state.is_open:  # nothing goes but the probe, which circuit_tick sends from the waiting messages
        # A message whose route has another leg moves to it (delivery.routing.failover); the rest wait.
        moved = failover.circuit_failover([c.id for c in ordered], provider, state.opened_at, now)
        until = now + timedelta(seconds=delays.circuit_park_delay())
        text = f"provider unavailable (circuit open since {state.opened_at:%H:%M:%S} UTC); waiting"
        for c in ordered:
            if c.id not in moved:
                park = Park(until, REASON_UNAVAILABLE, text, "provider_unavailable", {"circuit": "open"})
                decision.park.append((c, park))
        return
    gate = _AccountPass(provider, account, ordered, now)
    for c in ordered:
        gate.decide(c, decision)
    gate.save(now)


class _AccountPass:
    """One pass of the gate over one provider account's candidates: its limits and lines, read from their
    bucket rows (locked), then each message released or parked, then the rows saved."""

    def __init__(self, provider: str, account: str, ordered: list[Candidate], now: datetime) -> None:
        now_s = self.now_s = now.timestamp()
        self.ahead = settings.PACING_RELEASE_AHEAD_SECONDS
        self.origin = now_s + settings.PACING_DISPATCH_SECONDS
        senders = sorted({c.sender for c in ordered})
        sender_rates = {
            s: rate.segments_per_second
            for s, rate in capacity.sender_rates(provider, account, senders).items()
        }
        account_rate = capacity.account_rate(provider, account).segments_per_second
        tenant_ids = sorted({c.tenant_id for c in ordered})
        tenant_rates = {
            tid: float(rate)
            for tid, rate in Tenant.objects.filter(pk__in=tenant_ids, send_rate_per_second__gt=0).values_list(
                "pk", "send_rate_per_second"
            )
        }
        # Lines are per tenant and priority class: a tenant's transactional message never waits behind
        # that same tenant's bulk backlog.
        classes = sorted({(c.tenant_id, c.priority) for c in ordered})
        pairs = sorted({(c.sender, c.tenant_id, c.priority) for c in ordered})

        def key(kind: str, value: str = "") -> str:
            return bucket_key(provider, account, kind, value)

        keys = [
            (key("account"), "account", account_rate),
            (key("account", TRANSACTIONAL), "account", account_rate),
        ]
        keys += [(key("sender", s), "sender", sender_rates[s]) for s in senders]
        keys += [(key("tenant", str(t)), "tenant", r) for t, r in tenant_rates.items()]
        keys += [(key("share", f"{t}|{p}"), "share", account_rate) for t, p in classes]
        keys += [(key("tline", f"{t}|{p}"), "line", tenant_rates[t]) for t, p in classes if t in tenant_rates]
        keys += [(key("line", f"{s}|{t}|{p}"), "line", sender_rates[s]) for s, t, p in pairs]
        rows = rows_locked(keys, now)
        self.account = Limit(rows[key("account")], account_rate, now_s, "account", strict=False)
        self.account_tx = Limit(
            rows[key("account", TRANSACTIONAL)], account_rate, now_s, "account", strict=False
        )
        self.senders = {
            s: Limit(rows[key("sender", s)], sender_rates[s], now_s, "sender", strict=True) for s in senders
        }
        self.tenants = {
            t: Limit(rows[key("tenant", str(t))], r, now_s, "tenant", strict=False)
            for t, r in tenant_rates.items()
        }
        self.shares = {(t, p): Line(rows[key("share", f"{t}|{p}")], self.account, now_s) for t, p in classes}
        self.sender_lines = {
            (s, t, p): Line(rows[key("line", f"{s}|{t}|{p}")], self.senders[s], now_s) for s, t, p in pairs
        }
        self.tenant_lines = {
            (t, p): Line(rows[key("tline", f"{t}|{p}")], self.tenants[t], now_s)
            for t, p in classes
            if t in self.tenants
        }

    def decide(self, c: Candidate, decision: Decision) -> None:
        cost = max(1, int(c.segments or 1))
        limits: list[Limit] = [self.account, self.senders[c.sender]]
        lines = [
            self.sender_lines[(c.sender, c.tenant_id, c.priority)],
            self.shares[(c.tenant_id, c.priority)],
        ]
        if c.tenant_id in self.tenants:
            limits.append(self.tenants[c.tenant_id])
            lines.append(self.tenant_lines[(c.tenant_id, c.priority)])
        # A message seen for the first time queues behind its lines' promised slots; one whose slot has
        # come (reason ``paced``) is the front of its lines and goes as soon as the limits allow.
        first = c.reason_code != REASON_PACED
        sender = self.senders[c.sender]
        # Transactional keeps precedence over bulk already released on the account: it is held to the
        # account's rate by a budget of its own (account_tx), not by the account's whole budget; it is
        # still counted there, so the bulk that follows moves back.
        budgets = [self.account_tx if c.priority == TRANSACTIONAL else self.account]
        budgets += [limit for limit in limits if limit is not sender and limit is not self.account]
        start = max(limit.admit_at(self.now_s) for limit in budgets)
        if first:
            start = max(start, *(line.cursor for line in lines))
        start = sender.fit(start, cost, self.now_s, self.origin)
        if start < self.now_s + self.ahead - 1e-6:  # (float sums of intervals land a hair under a boundary)
            self._release(c, cost, start, limits, lines, first, decision)
        else:
            self._park(c, cost, limits, lines, first, decision)

    def _release(
        self,
        c: Candidate,
        cost: int,
        start: float,
        limits: list[Limit],
        lines: list[Line],
        first: bool,
        decision: Decision,
    ) -> None:
        """Released with its slot: submitted at that instant (the worker's event loop waits for it), so the
        provider sees the spacing, whatever the sweep's own cadence. One that can go at once has no slot."""
        now_s, origin, sender = self.now_s, self.origin, self.senders[c.sender]
        at_once = start <= now_s + AT_ONCE_SECONDS
        for limit in limits:
            # A message that goes at once leaves when a worker has it, about ``origin``, not now: its
            # sender's next slot is counted from there, or in a burst the first message of each sender
            # would reach the provider together with the next ones (one over the rate).
            leaves = origin if at_once and limit is sender else start
            limit.take(cost, start, now_s, origin, leaves_at=leaves)
        if c.priority == TRANSACTIONAL:
            self.account_tx.take(cost, start, now_s, origin)
        if first:  # its lines' next messages go after it, while they still have promised slots ahead
            for line in lines:
                line.follow(cost, start, now_s)
        decision.release.append(c)
        if not at_once:
            decision.not_before[c.id] = start

    def _park(
        self,
        c: Candidate,
        cost: int,
        limits: list[Limit],
        lines: list[Line],
        first: bool,
        decision: Decision,
    ) -> None:
        """It waits, in our store: its expected slot is behind this pass's earlier projections, and it comes
        back just in time to be released for that slot."""
        now_s = self.now_s
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
        until = from_epoch(max(slot, now_s + MIN_PARK_SECONDS))
        text = f"paced: {limited_by} at {rate:.3g} segments/s; expected at {until:%H:%M:%S} UTC"[:255]
        details = {"limited_by": limited_by, "segments_per_second": rate}
        decision.park.append((c, Park(until, REASON_PACED, text, "paced", details)))

    def save(self, now: datetime) -> None:
        limit_rows = [self.account, self.account_tx, *self.senders.values(), *self.tenants.values()]
        line_rows = [*self.shares.values(), *self.sender_lines.values(), *self.tenant_lines.values()]
        items: list[Limit | Line] = [*limit_rows, *line_rows]
        for item in items:
            item.save(now)
        rows_save(list({id(i.row): i.row for i in items}.values()))


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

    Rows locked in key order, as the release gate locks them (``rows_locked``), so a gate pass and any number
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
            limit = Limit(row, row.rate_configured, now_s, "sender", strict=True)
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
            rows_save(saved)
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
