"""The daily quota at execution: a release gate that runs after the capacity gate, in the sweep's
transaction, and a status listener that gives a booking back.

The gate sees the messages about to move ``scheduled -> queued`` (first sends; a retry's re-release is
not counted again: its segments were counted when it first went). Per tenant with a daily quota it reads
today's window once (locked: concurrent sweepers count one after the other), lets through what fits under
the quota, adds it to the window's ``released`` and, for the rest, applies the tenant's
``quota_exceeded_policy``:

* ``defer`` (default): the message stays ``scheduled`` with ``run_after`` = the next window's start,
  ``reason_code`` quota_exceeded and one ``quota_deferred`` timeline entry (with expected_send_at); its
  segments are booked in that window, so new requests for it see them;
* ``fail``: ``failed`` with reason quota_exceeded.

Cost per pass: nothing when no claimed message belongs to a tenant with a daily quota (one small query
on the tenants), else one insert, one locked read and one update per such tenant; never per message.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from scheduling.lifecycle import transitions
from scheduling.lifecycle.reasons import ReasonCode
from scheduling.limits import quotas
from scheduling.limits.models import QuotaWindow
from smsgw.models import Tenant
from smsgw.observability import events
from smsgw.stages import Candidate, Decision, Park
from smsgw.values.timeutil import utc_text

REASON = ReasonCode.QUOTA_EXCEEDED
PENDING = frozenset({"scheduled", "queued"})
ENDED_UNSENT = frozenset({"cancelled", "expired", "failed"})


def _tenants(ids) -> dict[int, Tenant]:
    return {
        t.pk: t
        for t in Tenant.objects.filter(pk__in=set(ids), daily_message_quota__gt=0).only(
            "pk", "daily_message_quota", "default_timezone", "quota_exceeded_policy"
        )
    }


def quota_gate(candidates: list[Candidate], now: datetime) -> Decision:
    firsts = [c for c in candidates if c.status == "scheduled"]
    tenants = _tenants(c.tenant_id for c in firsts) if firsts else {}
    if not tenants:
        return Decision(release=candidates)
    today = {tid: quotas.window_day(t, now) for tid, t in tenants.items()}
    following = {
        tid: quotas.window_day(tenants[tid], quotas.window_end(tenants[tid], d)) for tid, d in today.items()
    }
    # Today's rows (read and counted below) and tomorrow's (where deferred messages are booked), at once.
    quotas.windows_ensure([*today.items(), *following.items()])
    released = dict(
        ((tid, day), used)
        for tid, day, used in QuotaWindow.objects.select_for_update()
        .filter(tenant_id__in=list(today), day__in=set(today.values()))
        .order_by("tenant_id", "day")
        .values_list("tenant_id", "day", "released")
    )
    budget = {tid: t.daily_message_quota - released.get((tid, today[tid]), 0) for tid, t in tenants.items()}
    used: dict[int, int] = defaultdict(int)
    decision = Decision()
    over: list[Candidate] = []
    for c in candidates:
        if c.status != "scheduled" or c.tenant_id not in tenants:
            decision.release.append(c)
        elif c.segments <= budget[c.tenant_id]:
            budget[c.tenant_id] -= c.segments
            used[c.tenant_id] += c.segments
            decision.release.append(c)
        else:
            over.append(c)
    for tid, n in sorted(used.items()):
        quotas.bookings_add([(tenants[tid], now, n)], field="released", ensure=False)
    deferred = [c for c in over if tenants[c.tenant_id].quota_exceeded_policy != "fail"]
    failed = [c for c in over if tenants[c.tenant_id].quota_exceeded_policy == "fail"]
    if deferred:
        events.quota_rejected("daily_at_release_deferred", len(deferred))
    if failed:
        events.quota_rejected("daily_at_release_failed", len(failed))
    for c in deferred:
        tenant = tenants[c.tenant_id]
        resets_at = quotas.window_end(tenant, today[c.tenant_id])
        details = _details(tenant, today[c.tenant_id], released, used, resets_at)
        text = f"daily quota of {tenant.daily_message_quota} segments used up; waiting for the next window"
        decision.park.append((c, Park(resets_at, REASON, text, "quota_deferred", details)))
    # The deferred messages' segments go to the window they now wait for.
    quotas.bookings_add(
        [
            (tenants[c.tenant_id], quotas.window_end(tenants[c.tenant_id], today[c.tenant_id]), c.segments)
            for c in deferred
        ],
        ensure=False,
    )
    if failed:
        _fail(failed, tenants, today, released, used, now)
    return decision


def _details(tenant: Tenant, day, released: dict, used: dict, resets_at: datetime) -> dict:
    return {
        "quota": quotas.DAILY,
        "limit": tenant.daily_message_quota,
        "used": released.get((tenant.pk, day), 0) + used.get(tenant.pk, 0),
        "window": day.isoformat(),
        "resets_at": utc_text(resets_at),
    }


def _fail(
    failed: list[Candidate], tenants: dict, today: dict, released: dict, used: dict, now: datetime
) -> None:
    details = {
        c.id: _details(
            tenants[c.tenant_id],
            today[c.tenant_id],
            released,
            used,
            quotas.window_end(tenants[c.tenant_id], today[c.tenant_id]),
        )
        for c in failed
    }
    transitions.transition_versioned(
        [(c.id, c.version, {}) for c in failed],
        from_status="scheduled",
        to_status="failed",
        kind="failed",
        set_fields={
            "run_after": None,
            "reason_code": REASON,
            "status_reason": "daily quota used up when the message became due (tenant policy: fail)",
        },
        details=lambda mid: {"reason": REASON, **details[mid]},
        now=now,
    )


def quota_release_listener(
    ids: list[int], from_status: str, to_status: str, kind: str, now: datetime
) -> None:
    """A message that ends before it was submitted (cancelled, expired, failed from scheduled) gives its
    booking back; one that was already released today (queued) gives its released segments back too."""
    if from_status not in PENDING or to_status not in ENDED_UNSENT:
        return
    from scheduling.models import Message

    rows = list(
        Message.objects.filter(pk__in=ids, tenant__daily_message_quota__gt=0).values_list(
            "tenant_id", "due_at", "queued_at", "segments"
        )
    )
    if not rows:
        return
    tenants = _tenants(r[0] for r in rows)
    quotas.bookings_add([(tenants[t], due, n) for t, due, _, n in rows if t in tenants], sign=-1)
    if from_status == "queued":
        quotas.bookings_add(
            [(tenants[t], queued, n) for t, _, queued, n in rows if t in tenants and queued],
            field="released",
            sign=-1,
        )
