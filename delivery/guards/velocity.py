"""The velocity guard against SMS pumping (docs/guards.md): a release gate (the sweep's, listed in
config.wiring) that holds a tenant's sends for review when, within one fixed window
(SMSGW_VELOCITY_WINDOW_SECONDS),

* more than ``velocity_prefix_max`` messages go to one destination prefix (the first
  ``velocity_prefix_digits`` digits of the E.164 number, country code included), or
* more than ``velocity_new_numbers_max`` messages go to numbers the tenant never sent to before.

A held message stays ``scheduled`` with reason_code ``held_for_review`` (status_reason names the rule and
the prefix) and one ``held_for_review`` timeline entry; it is never released until an operator releases its
ReviewHold (delivery.guards.review_holds), and it expires at its validity like any waiting message. The gate
runs before pacing and quotas, so every message source (API, schedules, campaigns) passes it the same way.

Cost at a burst: per release pass, one query for the tenants' limits, one upsert per rule carrying one
row per distinct (rule, key), and, for the new-numbers rule, one statement that records the pass's
numbers in KnownNumber and returns those it did not have (the whole gate: 17-33 ms per 1,000 new
numbers, docs/benchmarks.md). Nothing per message; holding writes more, but only on the rare path.

A message is counted once: when it first passes the gate as a fresh ``scheduled`` message; one that
comes back (paced, waiting for the provider) or was released by an operator is not counted again, unless
its recipient was edited since (then it is a new message here: counted, and held over the limit).
Messages held are taken off the counter again, so the counter is what was let through.
"""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F

from delivery.guards.models import (
    KnownNumber,
    ReviewHold,
    ReviewHoldMessage,
    ReviewRule,
    ReviewState,
    VelocityCounter,
)
from scheduling.lifecycle.reasons import PASSED_VELOCITY, ReasonCode
from scheduling.models import Status
from smsgw.models import Tenant
from smsgw.runtime.db import PgInts, is_postgres
from smsgw.stages import Candidate, Decision, Park

REASON_HELD = ReasonCode.HELD_FOR_REVIEW
REASON_RELEASED = ReasonCode.REVIEW_RELEASED  # released by an operator: goes out, not counted or held again
REASON_CANCELLED = ReasonCode.REVIEW_CANCELLED
# Candidates seen by this gate before (they came back from a later gate or the provider's wait); an edit
# of the recipient clears these, so a new ``to`` is counted (and held) like a new message.
COUNTED_BEFORE = PASSED_VELOCITY
HOLD_PARK = timedelta(days=400)  # i.e. until the message's validity ends (park_rows caps it there)
PRUNE_EVERY_SECONDS = 60.0


@dataclass(frozen=True)
class Limits:
    prefix_max: int
    prefix_digits: int
    new_max: int

    @property
    def on(self) -> bool:
        return bool(self.prefix_max or self.new_max)


def tenant_limits(tenant_ids: Sequence[int]) -> dict[int, Limits]:
    rows = Tenant.objects.filter(pk__in=tenant_ids).values_list(
        "pk", "velocity_prefix_max", "velocity_prefix_digits", "velocity_new_numbers_max"
    )
    return {
        pk: Limits(
            prefix_max=settings.VELOCITY_PREFIX_MAX if pmax is None else pmax,
            prefix_digits=max(2, digits or settings.VELOCITY_PREFIX_DIGITS),
            new_max=settings.VELOCITY_NEW_NUMBERS_MAX if nmax is None else nmax,
        )
        for pk, pmax, digits, nmax in rows
    }


def window_start(now: datetime) -> int:
    width = settings.VELOCITY_WINDOW_SECONDS
    return int(now.timestamp()) // width * width


@cache
def _digest_key(secret: str) -> bytes:
    return hashlib.sha256(f"smsgw.velocity:{secret}".encode()).digest()


def number_digest(number: str) -> int:
    """A keyed 64-bit digest of a number: KnownNumber stores no second copy of recipients' numbers, and
    without the deployment's secret the digests cannot be reversed by hashing every possible number.
    (Rotating DJANGO_SECRET_KEY makes every number "new" once.)"""
    raw = hashlib.blake2b(number.encode(), digest_size=8, key=_digest_key(settings.SECRET_KEY)).digest()
    return int.from_bytes(raw, "big", signed=True)


def _numbers_record(tenant_id: int, digests: set[int]) -> set[int]:
    """Record these numbers as known to the tenant; returns the ones that were not (new numbers). On
    PostgreSQL one statement with the digests as one array (the ORM's lookup plus bulk insert of a
    thousand rows was most of the gate's time)."""
    if not digests:
        return set()
    if is_postgres():
        with connection.cursor() as cur:
            cur.execute(
                'INSERT INTO delivery_knownnumber ("tenant_id", "digest") '
                "SELECT %s, unnest(%s::bigint[]) ON CONFLICT DO NOTHING RETURNING digest",
                [tenant_id, PgInts(sorted(digests))],
            )
            return {row[0] for row in cur.fetchall()}
    known = set(
        KnownNumber.objects.filter(tenant_id=tenant_id, digest__in=digests).values_list("digest", flat=True)
    )
    new = digests - known
    KnownNumber.objects.bulk_create(
        [KnownNumber(tenant_id=tenant_id, digest=d) for d in sorted(new)], ignore_conflicts=True
    )
    return new


def _counters_add(tenant_id: int, rule: str, adds: dict[str, int], start: int) -> dict[str, int]:
    """Add to this window's counters, one statement for every key; returns each key's new total. Keys in
    a fixed order, so two sweepers adding to the same keys lock them in the same order."""
    if not adds:
        return {}
    keys = sorted(adds)
    values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(keys))
    params: list = []
    for key in keys:
        params += [tenant_id, rule, key, start, adds[key]]
    table = "delivery_velocitycounter"
    with connection.cursor() as cur:
        cur.execute(
            f'INSERT INTO {table} ("tenant_id", "rule", "key", "window_start", "count") '  # noqa: S608
            f"VALUES {values} ON CONFLICT (tenant_id, rule, key, window_start) "
            f"DO UPDATE SET count = {table}.count + excluded.count RETURNING key, count",
            params,
        )
        return dict(cur.fetchall())


def _counter_take_back(tenant_id: int, rule: str, key: str, start: int, n: int) -> None:
    VelocityCounter.objects.filter(tenant_id=tenant_id, rule=rule, key=key, window_start=start).update(
        count=F("count") - n
    )


def _released_in_window(tenant_id: int, rule: str, key: str, start: int) -> bool:
    """An operator released this key's hold in this window: it is not held again until the next one."""
    return ReviewHold.objects.filter(
        tenant_id=tenant_id, rule=rule, prefix=key, window_start=start, state=ReviewState.RELEASED
    ).exists()


def _hold(tenant_id: int, rule: str, key: str, limit: int, start: int, held: list[Candidate], now) -> Park:
    """The open hold for this key (made if none), with these messages added to it."""
    scope = {"tenant_id": tenant_id, "rule": rule, "prefix": key}
    hold = ReviewHold.objects.select_for_update().filter(**scope, state=ReviewState.OPEN).first()
    if hold is None:
        try:
            with transaction.atomic():
                hold = ReviewHold.objects.create(
                    **scope,
                    limit=limit,
                    window_seconds=settings.VELOCITY_WINDOW_SECONDS,
                    window_start=start,
                    opened_at=now,
                    last_held_at=now,
                )
        except IntegrityError:  # another sweeper opened it meanwhile
            hold = ReviewHold.objects.select_for_update().get(**scope, state=ReviewState.OPEN)
    hold.held_count += len(held)
    hold.last_held_at = now
    hold.save(update_fields=["held_count", "last_held_at"])
    ReviewHoldMessage.objects.bulk_create(
        [ReviewHoldMessage(hold=hold, message_id=c.id) for c in held], ignore_conflicts=True
    )
    details = {"review_hold_id": hold.pk, "rule": rule, "limit": limit, "expected_send_at": None}
    if key:
        details["prefix"] = f"+{key}"
    return Park(now + HOLD_PARK, REASON_HELD, hold.describe(), "held_for_review", details)


def _over_limit(
    tenant_id: int, rule: str, groups: dict[str, list[Candidate]], limit: int, start: int, now, decision
) -> set[int]:
    """Count the groups' messages; what goes over the limit is held (unless released in this window).
    Returns the held ids."""
    totals = _counters_add(tenant_id, rule, {k: len(v) for k, v in groups.items()}, start)
    held_ids: set[int] = set()
    for key, group in groups.items():
        before = totals[key] - len(group)
        over = group[max(0, limit - before) :]
        if not over or _released_in_window(tenant_id, rule, key, start):
            continue
        park = _hold(tenant_id, rule, key, limit, start, over, now)
        decision.park += [(c, park) for c in over]
        held_ids |= {c.id for c in over}
        _counter_take_back(tenant_id, rule, key, start, len(over))
    return held_ids


def _tenant_decide(tenant_id: int, group: list[Candidate], limits: Limits, now, decision: Decision) -> None:
    start = window_start(now)
    fresh, passing = [], []
    for c in group:
        if c.reason_code == REASON_HELD:  # still under review: waits on, no new entry
            decision.park.append((c, Park(now + HOLD_PARK, REASON_HELD, "", "held_for_review", {})))
        elif c.status != Status.SCHEDULED or c.reason_code in COUNTED_BEFORE:
            passing.append(c)
        else:
            fresh.append(c)
    held: set[int] = set()
    if limits.prefix_max and fresh:
        by_prefix: dict[str, list[Candidate]] = defaultdict(list)
        for c in fresh:
            by_prefix[c.to.removeprefix("+")[: limits.prefix_digits]].append(c)
        held = _over_limit(tenant_id, ReviewRule.PREFIX, by_prefix, limits.prefix_max, start, now, decision)
        fresh = [c for c in fresh if c.id not in held]
    if limits.new_max:
        digests = {c.id: number_digest(c.to) for c in [*fresh, *passing]}
        # Recorded before the decision (one statement tells new from known and records them); what
        # the rule then holds is taken back off, so a held number stays new.
        new_digests = _numbers_record(tenant_id, set(digests.values()))
        new = [c for c in fresh if digests[c.id] in new_digests]
        if new:
            held_new = _over_limit(
                tenant_id, ReviewRule.NEW_NUMBERS, {"": new}, limits.new_max, start, now, decision
            )
            if held_new:
                fresh = [c for c in fresh if c.id not in held_new]
                still_going = {digests[c.id] for c in [*fresh, *passing]}
                KnownNumber.objects.filter(
                    tenant_id=tenant_id,
                    digest__in={digests[i] for i in held_new} - still_going,
                ).delete()
    decision.release += fresh + passing


def velocity_gate(candidates: list[Candidate], now: datetime) -> Decision:
    """The first release gate (the order is config.wiring's): which candidates go on to pacing and quotas,
    and which wait for review."""
    decision = Decision()
    if not settings.GUARDS_ENABLED or not candidates:
        decision.release = list(candidates)
        return decision
    by_tenant: dict[int, list[Candidate]] = defaultdict(list)
    for c in candidates:
        by_tenant[c.tenant_id].append(c)
    limits = tenant_limits(list(by_tenant))
    for tenant_id, group in by_tenant.items():
        lim = limits.get(tenant_id)
        if lim is None or not lim.on:
            decision.release += group
        else:
            _tenant_decide(tenant_id, group, lim, now, decision)
    return decision


_last_prune = 0.0


def counters_prune(now: datetime) -> None:
    """Release tick: drop counters of windows before the current one (at most once a minute per
    process; bounded by the tenants and keys that sent)."""
    global _last_prune
    if time.monotonic() - _last_prune < PRUNE_EVERY_SECONDS:
        return
    _last_prune = time.monotonic()
    VelocityCounter.objects.filter(window_start__lt=window_start(now)).delete()
