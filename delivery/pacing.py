"""The release gate: which due messages may go to the provider now, and where the rest wait.

The sweep hands the gate the messages it has claimed as due (locked, still ``scheduled`` or ``queued``);
the gate answers which to release now and, for the others, until when they wait. A message that waits is
still ours: it stays in its status, cancellable, with ``run_after`` at its expected send time, reason
``paced`` (or ``provider_unavailable``) and one timeline entry saying so. Nothing is claimed and then
held in a worker, and nothing waits in the provider's queue where it could no longer be cancelled.

Limits, all in segments per second (a 3-segment SMS costs 3), each a shared ``RateBucket`` row:

* the provider account's cap (``AccountCapacity`` or SMSGW_ACCOUNT_RATE);
* each sender's rate (``SenderCapacity`` or the default for its type, delivery.capacity);
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

Backpressure (``throttle_signal``): a 429 or a full provider queue lowers the rate of the scope the
error names (sender or account) by SMSGW_AIMD_DECREASE, at most once per cooldown, and honours
Retry-After; the rate climbs back by SMSGW_AIMD_INCREASE_PER_SECOND of the configured rate per second,
never above it (AIMD).
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from delivery import capacity, circuit
from delivery.models import RateBucket
from delivery.providers import get_adapter
from scheduling.release import Candidate, Decision, Park
from smsgw.db import is_postgres
from smsgw.models import Tenant

log = logging.getLogger(__name__)

REASON_PACED = "paced"
REASON_UNAVAILABLE = circuit.REASON_UNAVAILABLE
REASON_PROBE = circuit.REASON_PROBE
TRANSACTIONAL = "transactional"
MIN_PARK_SECONDS = 0.05  # never park a message for less: it would only come straight back
LINE_EPSILON = 0.001


def bucket_key(provider: str, account: str, kind: str, value: str = "") -> str:
    return f"{provider}|{account}|{kind}|{value}"[:200]


def _epoch(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def _dt(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


class _Bucket:
    """One limit during one pass, in epoch seconds (cheap arithmetic per candidate)."""

    def __init__(self, row: RateBucket, configured: float, now: float, label: str) -> None:
        self.row = row
        self.label = label
        self.configured = configured
        effective = row.rate_effective
        last = _epoch(row.last_decrease_at)
        if last is None or now - last > 60 or row.rate_configured != configured:
            effective = configured  # not throttled lately (or reconfigured): the configured rate
        else:
            elapsed = max(0.0, now - _epoch(row.updated_at))
            effective = min(configured, effective + settings.AIMD_INCREASE_PER_SECOND * configured * elapsed)
        self.effective = max(effective, configured * settings.AIMD_FLOOR, 1e-6)
        self.interval = 1.0 / (self.effective * settings.PACING_HEADROOM)  # seconds per segment
        # Capacity left unused is kept for at most this long (so a pass that comes a little late does
        # not lose what accrued), which is also the most an idle limit releases at once. Small on
        # purpose: the provider counts arrivals in any one-second window.
        self.catch_up = settings.PACING_BURST_SECONDS
        self.tat = _epoch(row.tat)
        self.cursor = max(_epoch(row.projected_until), now)
        self.blocked = _epoch(row.blocked_until) or 0.0

    def admit_at(self, now: float) -> float:
        """When the next message may start: the limit's theoretical arrival time (a token bucket that
        keeps at most ``catch_up`` of unused capacity), and never before a Retry-After."""
        return max(now, self.tat, self.blocked)

    def take(self, cost: int, now: float) -> None:
        # A multi-segment message may start as soon as one segment's worth is there; it then pushes the
        # next start back by all its segments.
        self.tat = max(self.tat, now - self.catch_up) + cost * self.interval

    def project(self, cost: int, now: float, first: bool) -> float:
        """The slot of a message that waits: behind the slots promised before (first wait), or at the
        front of the line (a message that already waited and slipped)."""
        if not first:
            return self.admit_at(now)
        slot = max(self.cursor, self.admit_at(now))
        self.cursor = slot + cost * self.interval
        return slot

    def save(self, now: datetime) -> None:
        row = self.row
        row.rate_configured = self.configured
        row.rate_effective = self.effective
        row.tat = _dt(self.tat)
        row.projected_until = _dt(max(self.cursor, self.tat))
        row.updated_at = now


class _Cursor:
    """A tenant's own line on a limit (the account, or a sender), with no capacity of its own: its
    waiting messages' expected slots at that limit's rate, without pushing other tenants back."""

    def __init__(self, row: RateBucket, limit: _Bucket, now: float) -> None:
        self.row = row
        self.account = limit
        cursor = _epoch(row.projected_until)
        self.cursor = now if cursor < now else cursor

    def project(self, cost: int, now: float, first: bool) -> float:
        if not first:
            return now
        slot = max(self.cursor, self.account.admit_at(now))
        self.cursor = slot + cost * self.account.interval
        return slot

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
                    tat=now - timedelta(seconds=settings.PACING_BURST_SECONDS),  # starts with its allowance
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
        else:
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
    now_s = now.timestamp()
    ordered = fair_order(candidates)

    state = circuit.circuit_state(provider, account)
    if state.is_open:  # nothing goes but the probe, which circuit_tick sends from the waiting messages
        until = now + timedelta(seconds=settings.CIRCUIT_PARK_SECONDS)
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
    keys = [(bucket_key(provider, account, "account"), "account", account_rate)]
    keys += [
        (bucket_key(provider, account, "sender", s), "sender", sender_rates[s].segments_per_second)
        for s in senders
    ]
    keys += [(bucket_key(provider, account, "share", str(t)), "share", account_rate) for t in tenant_ids]
    pairs = sorted({(c.sender, c.tenant_id) for c in ordered})
    keys += [
        (bucket_key(provider, account, "line", f"{s}|{t}"), "line", sender_rates[s].segments_per_second)
        for s, t in pairs
    ]
    keys += [(bucket_key(provider, account, "tenant", str(t)), "tenant", r) for t, r in tenant_rates.items()]
    rows = _rows(keys, now)
    account_bucket = _Bucket(rows[keys[0][0]], account_rate, now_s, "account")
    sender_buckets = {
        s: _Bucket(
            rows[bucket_key(provider, account, "sender", s)],
            sender_rates[s].segments_per_second,
            now_s,
            "sender",
        )
        for s in senders
    }
    shares = {
        t: _Cursor(rows[bucket_key(provider, account, "share", str(t))], account_bucket, now_s)
        for t in tenant_ids
    }
    tenant_buckets = {
        t: _Bucket(rows[bucket_key(provider, account, "tenant", str(t))], r, now_s, "tenant")
        for t, r in tenant_rates.items()
    }
    # Each tenant's own line on each sender: a sender several tenants share (a messaging service, a
    # short code) still serves them in turn, its capacity shared, one tenant's backlog not in front.
    sender_lines = {
        (s, t): _Cursor(rows[bucket_key(provider, account, "line", f"{s}|{t}")], sender_buckets[s], now_s)
        for s, t in pairs
    }

    for c in ordered:
        cost = max(1, int(c.segments or 1))
        sender = sender_buckets[c.sender]
        limits = [account_bucket, sender]
        # The lines a new message joins: its sender's, and its own tenant's on the account (each tenant
        # has its own, so one tenant's backlog never lengthens another's line).
        lines: list[_Bucket | _Cursor] = [sender_lines[(c.sender, c.tenant_id)], shares[c.tenant_id]]
        if c.tenant_id in tenant_buckets:
            limits.append(tenant_buckets[c.tenant_id])
            lines.append(tenant_buckets[c.tenant_id])
        first = c.reason_code != REASON_PACED
        # A message seen for the first time does not jump a line of messages already promised a slot
        # (they would then slip, again and again); one whose slot has come goes when the limits allow.
        queue_ahead = first and any(line.cursor > now_s + LINE_EPSILON for line in lines)
        if not queue_ahead and max(b.admit_at(now_s) for b in limits) <= now_s:
            for b in limits:
                b.take(cost, now_s)
            decision.release.append(c)
            continue
        if first:
            slots = [(line.project(cost, now_s, True), line) for line in lines]
            slots += [(b.admit_at(now_s), b) for b in limits]
        else:  # its slot came but the capacity did not: the front of the line
            slots = [(b.admit_at(now_s), b) for b in limits]
        slot, binding = max(slots, key=lambda pair: pair[0])
        until = _dt(max(slot, now_s + MIN_PARK_SECONDS))
        if isinstance(binding, _Cursor):
            binding = binding.account
        limited_by = f"{binding.label} {c.sender}" if binding.label == "sender" else binding.label
        rate = binding.effective * settings.PACING_HEADROOM
        decision.park.append(
            (
                c,
                Park(
                    until,
                    REASON_PACED,
                    f"paced: {limited_by} at {rate:.3g} segments/s; expected at {until:%H:%M:%S} UTC"[:255],
                    "paced",
                    {
                        "expected_send_at": until.isoformat(),
                        "limited_by": limited_by,
                        "segments_per_second": rate,
                    },
                ),
            )
        )

    buckets = [
        account_bucket,
        *sender_buckets.values(),
        *tenant_buckets.values(),
        *shares.values(),
        *sender_lines.values(),
    ]
    for bucket in buckets:
        bucket.save(now)
    _rows_save([b.row for b in buckets])


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
    key = bucket_key(provider, account, kind, value if kind == "sender" else "")
    cooldown = now - timedelta(seconds=settings.AIMD_COOLDOWN_SECONDS)
    with transaction.atomic():
        decreased = (
            RateBucket.objects.filter(key=key)
            .exclude(last_decrease_at__gt=cooldown)
            .update(
                rate_effective=Greatest(
                    F("rate_effective") * settings.AIMD_DECREASE, F("rate_configured") * settings.AIMD_FLOOR
                ),
                last_decrease_at=now,
                throttles=F("throttles") + 1,
            )
        )
        if retry_after:
            until = now + timedelta(seconds=retry_after)
            RateBucket.objects.filter(key=key).exclude(blocked_until__gt=until).update(blocked_until=until)
    if decreased:
        log.warning("provider throttled %s %s: rate lowered", kind, "(account)" if kind == "account" else "")
