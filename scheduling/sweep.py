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
from scheduling.models import Message, Priority, Status
from scheduling.quiet import QuietWindow

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
    quiet_deferred: int = 0
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return (
            self.expired
            + sum(self.queued.values())
            + self.republished
            + self.leases_expired
            + self.quiet_deferred
        )


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
            # Rows with a quiet window are released by due_quiet_check, which looks at the clock first.
            where_sql='"priority" = %s AND "run_after" <= %s AND "quiet_timezone" = \'\'',
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


_QUIET_COLUMNS = ("id", "version", "priority", "due_at", "quiet_start", "quiet_end", "quiet_timezone")


def due_quiet_check(*, now: datetime | None = None, limit: int) -> tuple[dict[str, int], int]:
    """Quiet hours at execution time: due messages that carry a quiet window (msg_quiet_due, which
    holds no other row) are checked against the clock now, not against their due time. Outside the
    window they go to ``queued`` like any due message; inside it (made due late by an outage, a retry
    or a long backlog) they are moved to the window's end, and the move is recorded on the message
    (quiet_deferred_from keeps the first due time) and in its timeline. Returns (queued per priority,
    deferred)."""
    now = now or timezone.now()
    queued: dict[str, int] = {}
    qs = (
        Message.objects.filter(status=Status.SCHEDULED, run_after__lte=now)
        .exclude(quiet_timezone="")
        .order_by("run_after")
    )
    # Usually nothing carries a window: one probe of the (then empty) partial index, and no write
    # transaction (on SQLite that would take the database's write lock every pass).
    if not qs.exists():
        return queued, 0
    with transaction.atomic():
        # SKIP LOCKED: concurrent sweeps check disjoint rows (ignored on SQLite, where the IMMEDIATE
        # transaction serialises writers and the CAS below decides).
        rows = list(
            qs.select_for_update(skip_locked=True).values(*_QUIET_COLUMNS, "quiet_deferred_from")[:limit]
        )
        if not rows:
            return queued, 0
        deferred, details, release = [], {}, {}
        for row in rows:
            window = QuietWindow(row["quiet_start"], row["quiet_end"], row["quiet_timezone"])
            end = window.defer(now)
            if end is None:
                release.setdefault(row["priority"], []).append(row["id"])
                continue
            first_due = row["quiet_deferred_from"] or row["due_at"]
            deferred.append(
                (
                    row["id"],
                    row["version"],
                    {"due_at": end, "run_after": end, "quiet_deferred_from": first_due},
                )
            )
            details[row["id"]] = {
                "stage": "execution",
                "reason": "due while inside quiet hours",
                "quiet_hours": window.as_dict(),
                "due_at": row["due_at"].isoformat(),
                "new_due_at": end.isoformat(),
                "note": window.describe_move(now, end),
            }
        moved = transitions.transition_versioned(
            deferred,
            from_status=Status.SCHEDULED,
            to_status=Status.SCHEDULED,
            kind="quiet_hours_deferred",
            details=details.get,
            per_row_columns=["due_at", "run_after", "quiet_deferred_from"],
            now=now,
        )
        for priority, ids in release.items():
            won = transitions.transition_many(
                ids,
                from_status=Status.SCHEDULED,
                to_status=Status.QUEUED,
                kind="queued",
                set_fields={
                    "queued_at": now,
                    "run_after": now + timedelta(seconds=settings.QUEUED_RECOVERY_SECONDS),
                },
                now=now,
            )
            won_ids = [r["id"] for r in won]
            _publish_after_commit(SEND_TASK, send_queue(priority), won_ids)
            queued[priority] = len(won_ids)
    return queued, len(moved)


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
    quiet_queued, report.quiet_deferred = due_quiet_check(now=now, limit=limit)
    for priority in PRIORITY_ORDER:
        claimed = len(due_messages_claim(priority=priority, now=now, limit=limit))
        report.queued[priority] = claimed + quiet_queued.get(priority, 0)
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
            if report.quiet_deferred:
                log.info("sweep quiet_hours_deferred=%d", report.quiet_deferred)
        if time.monotonic() >= deadline:
            return reports
        if not report.total:
            time.sleep(min(idle_sleep, max(0.0, deadline - time.monotonic())))
