"""Due-work sweep: the only path from the schedule store to the send queues.

The sweep never calls a provider. Each pass claims bounded batches with one statement each, moves them
on by compare-and-set, and publishes send work after commit. Cost is proportional to what is due
(partial indexes on run_after per status), never to how many messages are pending.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from scheduling.dispatch import recovery, release
from scheduling.lifecycle import transitions
from scheduling.lifecycle.reasons import ReasonCode
from scheduling.models import Priority, Status
from smsgw import stages
from smsgw.observability import events

log = logging.getLogger(__name__)

# Report order; the release gate (delivery.flow.pacing) decides who goes first.
PRIORITY_ORDER = (Priority.TRANSACTIONAL, Priority.BULK)


@dataclass
class SweepReport:
    expired: int = 0
    queued: dict[str, int] = field(default_factory=dict)
    republished: int = 0
    leases_expired: int = 0
    quiet_deferred: int = 0
    paced: int = 0
    unavailable: int = 0
    lost: int = 0
    seconds: float = 0.0
    # A step took as many rows as its batch allows, so more may be due already: the next pass starts at
    # once. Otherwise it waits the idle interval first (sweep_for).
    full: bool = False

    @property
    def total(self) -> int:
        return (
            self.expired
            + sum(self.queued.values())
            + self.republished
            + self.leases_expired
            + self.quiet_deferred
            + self.paced
            + self.unavailable
        )


def _publish(task: stages.Task, queue: str, ids: list[int]) -> None:
    size = settings.SEND_BATCH_SIZE
    for start in range(0, len(ids), size):
        task.apply_async(args=[ids[start : start + size]], queue=queue)


def _publish_after_commit(task: stages.Task, queue: str, ids: list[int]) -> None:
    if ids:
        transaction.on_commit(lambda: _publish(task, queue, ids))


def due_expire(*, now: datetime | None = None, limit: int) -> int:
    """Messages whose validity passed before they were submitted: `scheduled` (never sent, or waiting
    for capacity) and `queued` (a retry or a held message) alike end `expired` at their time."""
    now = now or timezone.now()
    total = 0
    for status, reason in (
        (Status.SCHEDULED, "validity passed before submission"),
        (Status.QUEUED, "validity passed while waiting to be sent again"),
    ):
        rows = transitions.claim(
            from_status=status,
            to_status=Status.EXPIRED,
            kind="expired",
            where_sql='"expires_at" <= %s AND "run_after" <= %s',
            where_params=[now, now],
            order_by='"expires_at"',  # through msg_waiting_expiry: only expired rows are read
            limit=limit,
            set_fields={
                "run_after": None,
                "status_reason": reason,
                "reason_code": ReasonCode.EXPIRED,
            },
            now=now,
        )
        total += len(rows)
    return total


def sending_leases_expire(*, now: datetime | None = None, limit: int) -> int:
    """sending rows whose lease ran out (worker died, or an uncertain attempt awaits a look-up): extend
    the lease and hand them to the reconciler, which asks the provider before anything is resent."""
    now = now or timezone.now()
    with transaction.atomic():
        rows = transitions.claim(
            from_status=Status.SENDING,
            to_status=Status.SENDING,
            kind="reconcile_scheduled",
            where_sql='"run_after" <= %s',
            where_params=[now],
            order_by='"run_after"',
            limit=limit,
            set_fields={"run_after": now + timedelta(seconds=settings.SENDING_LEASE_SECONDS)},
            details={"reason": "send lease expired; provider will be asked before any resend"},
            now=now,
        )
        ids = [r["id"] for r in rows]
        _publish_after_commit(stages.reconcile_batch(), "reconcile", ids)
    return len(ids)


def sweep_once(*, now: datetime | None = None, limit: int | None = None) -> SweepReport:
    # Each step reads the clock itself: a timeline stamp must never precede the event that caused it.
    started = time.perf_counter()
    limit = limit or settings.SWEEP_BATCH_SIZE
    report = SweepReport()
    report.expired = due_expire(now=now, limit=limit)
    # Tasks the broker lost (restarted empty, or an empty queue while rows wait): re-published this pass.
    report.lost = recovery.lost_tasks_mark(now or timezone.now())
    release.release_ticks(now or timezone.now())
    released = release.due_release(now=now, limit=limit)
    report.queued = {p: released.queued.get(p, 0) for p in PRIORITY_ORDER}
    report.republished = released.republished
    report.quiet_deferred = released.quiet_deferred
    report.paced = released.paced
    report.unavailable = released.unavailable
    report.leases_expired = sending_leases_expire(now=now, limit=limit)
    report.full = report.expired >= limit or released.full or report.leases_expired >= limit
    report.seconds = time.perf_counter() - started
    return report


def sweep_for(seconds: float, *, idle_sleep: float = 0.05) -> list[SweepReport]:
    """Run passes for about ``seconds``: back-to-back while a backlog fills whole batches, otherwise a
    short sleep between passes. Beat starts one of these per interval, so due work waits at most
    ~idle_sleep (plus a pass), not a whole beat tick.

    A pass that took less than a batch has caught up with what was due: starting the next one at once
    would release only what fell due during this pass. Under a steady 200 due a second, back-to-back
    passes ran some 20 times a second at 10-14 messages each, and each pass's fixed statements, and the
    send task it publishes, cost the same for 12 messages as for 250 (`bench soak`)."""
    deadline = time.monotonic() + seconds
    reports = []
    while True:
        try:
            report = sweep_once()
        except Exception as exc:  # the pass rolled back; the next beat tick starts another
            events.claim_failed("sweep", exc)
            raise
        events.sweep_pass(report)
        events.heartbeat("sweep")
        if report.total:
            reports.append(report)
            log.info(
                "sweep expired=%d queued=%s republished=%d leases_expired=%d in %.1f ms",
                report.expired,
                report.queued,
                report.republished,
                report.leases_expired,
                report.seconds * 1000,
            )
            if report.paced or report.unavailable:
                log.info("sweep paced=%d provider_unavailable=%d", report.paced, report.unavailable)
            if report.lost:
                log.info("sweep lost_tasks_marked=%d", report.lost)
            if report.quiet_deferred:
                log.info("sweep quiet_hours_deferred=%d", report.quiet_deferred)
        if time.monotonic() >= deadline:
            return reports
        if not report.full:
            time.sleep(min(idle_sleep, max(0.0, deadline - time.monotonic())))
