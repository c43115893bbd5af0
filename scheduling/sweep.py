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

from scheduling import transitions
from scheduling.models import Priority, Status

log = logging.getLogger(__name__)

SEND_TASK = "delivery.send_batch"
RECONCILE_TASK = "delivery.reconcile_batch"
# Transactional first in every pass; bulk still gets a full batch per pass, so it never starves.
PRIORITY_ORDER = (Priority.TRANSACTIONAL, Priority.BULK)


def send_queue(priority: str) -> str:
    return f"send.{priority}"


@dataclass
class SweepReport:
    expired: int = 0
    queued: dict[str, int] = field(default_factory=dict)
    republished: int = 0
    leases_expired: int = 0
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return self.expired + sum(self.queued.values()) + self.republished + self.leases_expired


def _publish(task: str, queue: str, ids: list[int]) -> None:
    from smsgw.celery import app

    size = settings.SEND_BATCH_SIZE
    for start in range(0, len(ids), size):
        app.send_task(task, args=[ids[start : start + size]], queue=queue)


def _publish_after_commit(task: str, queue: str, ids: list[int]) -> None:
    if ids:
        transaction.on_commit(lambda: _publish(task, queue, ids))


def due_expire(*, now: datetime | None = None, limit: int) -> int:
    now = now or timezone.now()
    rows = transitions.claim(
        from_status=Status.SCHEDULED,
        to_status=Status.EXPIRED,
        kind="expired",
        where_sql='"run_after" <= %s AND "expires_at" <= %s',
        where_params=[now, now],
        order_by='"run_after"',
        limit=limit,
        set_fields={
            "expired_at": now,
            "run_after": None,
            "status_reason": "validity passed before submission",
        },
        now=now,
    )
    return len(rows)


def due_messages_claim(*, priority: str, now: datetime | None = None, limit: int) -> list[int]:
    """scheduled -> queued for up to ``limit`` due messages of one priority class; publishes after commit."""
    now = now or timezone.now()
    with transaction.atomic():
        rows = transitions.claim(
            from_status=Status.SCHEDULED,
            to_status=Status.QUEUED,
            kind="queued",
            where_sql='"priority" = %s AND "run_after" <= %s',
            where_params=[priority, now],
            order_by='"run_after"',
            limit=limit,
            set_fields={
                "queued_at": now,
                "run_after": now + timedelta(seconds=settings.QUEUED_RECOVERY_SECONDS),
            },
            now=now,
        )
        ids = [r["id"] for r in rows]
        _publish_after_commit(SEND_TASK, send_queue(priority), ids)
    return ids


def stale_queued_republish(*, now: datetime | None = None, limit: int) -> int:
    """queued rows whose run_after passed: either a retry whose backoff elapsed, or a broker message
    presumed lost. Re-publishing is harmless: the worker's queued->sending CAS lets one task win."""
    now = now or timezone.now()
    total = 0
    for priority in PRIORITY_ORDER:
        with transaction.atomic():
            rows = transitions.claim(
                from_status=Status.QUEUED,
                to_status=Status.QUEUED,
                kind="republished",
                where_sql='"priority" = %s AND "run_after" <= %s',
                where_params=[priority, now],
                order_by='"run_after"',
                limit=limit,
                set_fields={"run_after": now + timedelta(seconds=settings.QUEUED_RECOVERY_SECONDS)},
                now=now,
            )
            ids = [r["id"] for r in rows]
            _publish_after_commit(SEND_TASK, send_queue(priority), ids)
        total += len(ids)
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
        _publish_after_commit(RECONCILE_TASK, "reconcile", ids)
    return len(ids)


def sweep_once(*, now: datetime | None = None, limit: int | None = None) -> SweepReport:
    # Each step reads the clock itself: a timeline stamp must never precede the event that caused it.
    started = time.perf_counter()
    limit = limit or settings.SWEEP_BATCH_SIZE
    report = SweepReport()
    report.expired = due_expire(now=now, limit=limit)
    for priority in PRIORITY_ORDER:
        report.queued[priority] = len(due_messages_claim(priority=priority, now=now, limit=limit))
    report.republished = stale_queued_republish(now=now, limit=limit)
    report.leases_expired = sending_leases_expire(now=now, limit=limit)
    report.seconds = time.perf_counter() - started
    return report


def sweep_for(seconds: float, *, idle_sleep: float = 0.05) -> list[SweepReport]:
    """Run passes for about ``seconds``: back-to-back while work is due, a short sleep when idle. Beat
    starts one of these per interval, so due work waits at most ~idle_sleep, not a whole beat tick."""
    deadline = time.monotonic() + seconds
    reports = []
    while True:
        report = sweep_once()
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
        if time.monotonic() >= deadline:
            return reports
        if not report.total:
            time.sleep(min(idle_sleep, max(0.0, deadline - time.monotonic())))
