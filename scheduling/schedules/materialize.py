"""The materializer: turns schedule occurrences into ordinary Messages ahead of time, within a rolling
horizon (SMSGW_SCHEDULE_HORIZON_SECONDS), so the existing sweep sends them like any other message.

A run claims a bounded batch of active schedules whose cursor is inside the horizon (the partial index
sch_materialize_due; ``FOR UPDATE SKIP LOCKED`` on PostgreSQL so concurrent runs take disjoint
batches), expands each rule from its cursor, inserts one ``scheduled`` Message per occurrence with
``run_after = due_at``, writes each one's "created" event, and moves the cursors, all in one
transaction. A crash rolls the whole batch back; a run that sees a row it (or anyone) already made is
stopped by the unique occurrence key (INSERT ... ON CONFLICT DO NOTHING), never by luck. The cost of a
run is the batch it claims: with nothing due, one index probe that finds nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import overload

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from scheduling.dispatch.quiet import QuietWindow, tenant_quiet_window
from scheduling.lifecycle.schedules import schedules_end
from scheduling.messages.birth import Births, messages_birth
from scheduling.models import Schedule, ScheduleStatus, Status, new_public_id
from scheduling.schedules.recurrence import ExpansionTooCostly, Occurrence, Recurrence
from scheduling.schedules.rrules import parse_exdates, parse_rrule
from smsgw.models import Tenant
from smsgw.runtime.db import server_bound_cursor
from smsgw.tenancy.priority import priority_capped

log = logging.getLogger(__name__)

# One schedule makes at most this many occurrences per claim; a denser horizon finishes in the next
# batch of the same run. Bounds one transaction whatever the rule.
MAX_OCCURRENCES_PER_CLAIM = 200


@dataclass
class MaterializeReport:
    schedules: int = 0
    created: int = 0
    existing: int = 0  # occurrences whose key was already there (a re-run): left untouched
    ended: int = 0
    seconds: float = 0.0
    created_ids: list[int] = field(default_factory=list, repr=False)


@overload
def naive(value: datetime) -> datetime: ...
@overload
def naive(value: None) -> None: ...
@overload
def naive(value: datetime | None) -> datetime | None: ...
def naive(value: datetime | None) -> datetime | None:
    """A local wall time stored in a DateTimeField (as UTC-less, like Message.requested_local_time)."""
    return None if value is None else value.astimezone(UTC).replace(tzinfo=None)


@overload
def stored(value: datetime) -> datetime: ...
@overload
def stored(value: None) -> None: ...
@overload
def stored(value: datetime | None) -> datetime | None: ...
def stored(value: datetime | None) -> datetime | None:
    return None if value is None else timezone.make_aware(value, UTC)


@lru_cache(maxsize=8192)
def _recurrence(
    rrule: str, start: datetime, tz_name: str, dst_policy: str, exdate: tuple, last: datetime | None
) -> Recurrence:
    exdates, exdays = parse_exdates(list(exdate), tz_name)
    return Recurrence(
        parse_rrule(rrule),
        start=start,
        tz_name=tz_name,
        dst_policy=dst_policy,
        exdates=exdates,
        exdays=exdays,
        last_local=last,
    )


def recurrence_of(schedule: Schedule) -> Recurrence:
    """The schedule's stored (already validated) definition as a Recurrence, cached per definition."""
    return _recurrence(
        schedule.rrule,
        naive(schedule.start_local),
        schedule.timezone,
        schedule.dst_policy,
        tuple(schedule.exdate or ()),
        naive(schedule.count_last_local),
    )


def quiet_window_of(schedule: Schedule, tenant: Tenant) -> QuietWindow | None:
    return tenant_quiet_window(
        tenant,
        override=schedule.quiet_hours,
        recipient_timezone=schedule.recipient_timezone or None,
        priority=schedule.priority,
    )


def occurrence_key(schedule: Schedule, local: datetime, version: int | None = None) -> str:
    return f"{schedule.public_id}:{local:%Y%m%dT%H%M%S}:v{version or schedule.version}"


@dataclass
class _Plan:
    schedule: Schedule
    rows: list[tuple[dict, dict]]  # (Message field values by attname, "created" event details)
    cursor: Occurrence | None  # the first occurrence not made in this claim; None: the rule has ended
    made: int = 0  # rows that went in (a row whose occurrence key exists is not made again)


def _occurrence_row(
    schedule: Schedule, occ: Occurrence, window: QuietWindow | None, now: datetime, priority: str
) -> tuple[dict, dict]:
    due = occ.due_at
    key = occurrence_key(schedule, occ.local)
    details = {
        "source": "schedule",
        "schedule": schedule.public_id,
        "schedule_version": schedule.version,
        "occurrence": key,
        "rrule": schedule.rrule,
        "local_time": occ.local.isoformat(),
        "timezone": schedule.timezone,
        "dst_adjustment": occ.adjustment.value,
        "occurrence_at": due.isoformat(),
    }
    if occ.adjustment.value != "none":
        details["dst_note"] = occ.resolved.describe()
    deferred_from = None
    if window is not None:
        details["quiet_hours"] = window.as_dict()
        moved = window.defer(due)
        if moved is not None:
            deferred_from, due = due, moved
            details["quiet_hours_note"] = window.describe_move(deferred_from, due)
    expires = due + timedelta(seconds=schedule.validity_seconds)
    details.update(due_at=due.isoformat(), expires_at=expires.isoformat())
    row = {
        "public_id": new_public_id(),
        "tenant_id": schedule.tenant_id,
        "to": schedule.to,
        "from_number": schedule.from_number,
        "sender_pool": schedule.sender_pool,
        "body": schedule.body,
        "encoding": schedule.encoding,
        "segments": schedule.segments,
        "priority": priority,
        "metadata": schedule.metadata,
        "requested_send_at": occ.local.isoformat(),
        "requested_local_time": stored(occ.local),
        "requested_timezone": schedule.timezone,
        "dst_policy": schedule.dst_policy,
        "dst_adjustment": occ.adjustment.value,
        "due_at": due,
        "expires_at": expires,
        "status": Status.SCHEDULED.value,
        "version": 1,
        "run_after": due,
        "schedule_id": schedule.pk,
        "occurrence_key": key,
        "schedule_version": schedule.version,
        "quiet_start": window.start if window else None,
        "quiet_end": window.end if window else None,
        "quiet_timezone": window.timezone if window else "",
        "quiet_deferred_from": deferred_from,
        "created_at": now,
        "updated_at": now,
    }
    return row, details


def _plan(schedule: Schedule, tenant: Tenant, horizon_end: datetime, now: datetime) -> _Plan:
    rec = recurrence_of(schedule)
    window = quiet_window_of(schedule, tenant)
    rows: list[tuple[dict, dict]] = []
    cursor = None
    # Claimed by its cursor, which is set and cleared as a pair (_advance, service._start_cursor).
    assert schedule.cursor_local is not None and schedule.next_occurrence_at is not None
    for occ in rec.resume(naive(schedule.cursor_local), schedule.next_occurrence_at):
        if occ.due_at > horizon_end or len(rows) >= MAX_OCCURRENCES_PER_CLAIM:
            cursor = occ
            break
        rows.append(_occurrence_row(schedule, occ, window, now, priority_capped(tenant, schedule.priority)))
    return _Plan(schedule, rows, cursor)


def _plan_or_end(schedule: Schedule, tenant: Tenant, horizon_end: datetime, now: datetime) -> _Plan:
    """``_plan``, except that a stored rule past the expansion budget (one saved before the budget
    existed: creation and edits refuse them now) is planned as having nothing left, so it ends instead
    of failing the whole batch at every run."""
    try:
        return _plan(schedule, tenant, horizon_end, now)
    except ExpansionTooCostly as exc:
        log.warning("materialize schedule=%s ended: its rule %s", schedule.public_id, exc)
        return _Plan(schedule, [], None)


EVENT_ACTOR = "system:materializer"


def _advance(plans: list[_Plan], births: Births, horizon_end: datetime, now: datetime) -> int:
    """Move each claimed schedule's cursor past what it just made, in one statement, and end those
    with no occurrence left. Returns how many ended."""
    for plan in plans:
        plan.made = sum(1 for row, _ in plan.rows if row["public_id"] in births.id_of)
        s = plan.schedule
        s.materialized_until = horizon_end
        s.materialized_count += plan.made
        s.updated_at = now
        if plan.cursor is None:
            s.cursor_local, s.next_occurrence_at = None, None
        else:
            s.cursor_local, s.next_occurrence_at = stored(plan.cursor.local), plan.cursor.due_at
    if connection.vendor != "postgresql":
        Schedule.objects.bulk_update([p.schedule for p in plans], list(_ADVANCED))
    else:
        _advance_pg(plans, horizon_end, now)
    # The rule has no occurrence left: ended (its status only ever moves by a transition).
    return schedules_end([p.schedule for p in plans if p.cursor is None], now=now)


def _advance_pg(plans: list[_Plan], horizon_end: datetime, now: datetime) -> None:
    with server_bound_cursor() as cur:
        cur.execute(
            'UPDATE "scheduling_schedule" AS s SET '
            '"cursor_local" = v.cursor_local, "next_occurrence_at" = v.next_at, '
            '"materialized_until" = %s, "materialized_count" = s."materialized_count" + v.made, '
            '"updated_at" = %s '
            "FROM unnest(%s::bigint[], %s::timestamptz[], "
            "%s::timestamptz[], %s::int[]) AS v(id, cursor_local, next_at, made) "
            "WHERE s.id = v.id".replace("%s", "%b"),
            [
                horizon_end,
                now,
                [p.schedule.pk for p in plans],
                [p.schedule.cursor_local for p in plans],
                [p.schedule.next_occurrence_at for p in plans],
                [p.made for p in plans],
            ],
        )


_ADVANCED = (
    "cursor_local",
    "next_occurrence_at",
    "materialized_until",
    "materialized_count",
    "updated_at",
)


def schedules_materialize(*, now: datetime | None = None, limit: int | None = None) -> MaterializeReport:
    """One batch: claim up to ``limit`` due schedules, make their occurrences up to now + horizon and
    move their cursors, in one transaction."""
    started = time.perf_counter()
    now = now or timezone.now()
    limit = limit or settings.MATERIALIZE_BATCH_SIZE
    horizon_end = now + timedelta(seconds=settings.SCHEDULE_HORIZON_SECONDS)
    report = MaterializeReport()
    with transaction.atomic():
        # A disabled tenant's schedules make nothing until it is enabled again (their cursors wait).
        qs = Schedule.objects.filter(
            status=ScheduleStatus.ACTIVE, next_occurrence_at__lte=horizon_end, tenant__is_active=True
        ).order_by("next_occurrence_at")
        if connection.vendor == "postgresql":
            # SKIP LOCKED: two materializers take disjoint batches; a schedule being edited (its row
            # locked by the service) is simply left for the next run. Only the schedule rows are locked.
            qs = qs.select_for_update(skip_locked=True, of=("self",))
        schedules = list(qs[:limit])
        if not schedules:
            report.seconds = time.perf_counter() - started
            return report
        tenants = Tenant.objects.in_bulk({s.tenant_id for s in schedules})
        plans = [_plan_or_end(s, tenants[s.tenant_id], horizon_end, now) for s in schedules]
        rows = [row for p in plans for row in p.rows]
        births = messages_birth(rows, actor=EVENT_ACTOR, now=now, tenants=tenants)
        ids, existing = births.ids, births.existing
        report.ended = _advance(plans, births, horizon_end, now)
    report.schedules, report.created, report.existing = len(schedules), len(ids), existing
    report.created_ids = ids
    report.seconds = time.perf_counter() - started
    return report


def schedule_materialize_one(schedule: Schedule, *, now: datetime) -> MaterializeReport:
    """Materialize one schedule whose row the caller holds (created in, or locked by, the caller's
    transaction): the service path, so a new or changed schedule's first occurrences exist at once."""
    report = MaterializeReport()
    if schedule.status != ScheduleStatus.ACTIVE or schedule.next_occurrence_at is None:
        return report
    horizon_end = now + timedelta(seconds=settings.SCHEDULE_HORIZON_SECONDS)
    while schedule.status == ScheduleStatus.ACTIVE and schedule.next_occurrence_at <= horizon_end:
        plan = _plan(schedule, schedule.tenant, horizon_end, now)
        births = messages_birth(
            plan.rows, actor=EVENT_ACTOR, now=now, tenants={schedule.tenant_id: schedule.tenant}
        )
        ids, existing = births.ids, births.existing
        report.ended += _advance([plan], births, horizon_end, now)
        report.created += len(ids)
        report.existing += existing
        report.created_ids += ids
        if not plan.rows:
            break
    report.schedules = 1
    return report


def materialize_for(seconds: float) -> list[MaterializeReport]:
    """Run batches for about ``seconds``: back to back while schedules are due, then return. Beat
    starts one of these per SMSGW_MATERIALIZE_INTERVAL."""
    deadline = time.monotonic() + seconds
    reports = []
    while time.monotonic() < deadline:
        report = schedules_materialize()
        if not report.schedules:
            break
        reports.append(report)
        log.info(
            "materialize schedules=%d created=%d existing=%d ended=%d in %.1f ms",
            report.schedules,
            report.created,
            report.existing,
            report.ended,
            report.seconds * 1000,
        )
    return reports
