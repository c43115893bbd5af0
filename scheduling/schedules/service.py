"""Writes behind the schedules API: create, change (a new version), pause, resume, cancel.

A schedule is a definition; its executions are ordinary Messages made by ``scheduling.materialize``.
Every change locks the schedule row, validates the whole resulting definition (a rejected request
changes nothing), records an immutable ScheduleVersion with actor and time, and deals with the
occurrences already made:

* occurrences of the old version still ``scheduled`` and not yet due are cancelled (through
  ``scheduling.lifecycle.transitions``, each with a timeline event naming the new version) and regenerated
  from
  the new definition;
* occurrences already due, ``queued`` or further are left alone, reported in the response and given a
  timeline note, and the new version starts after the latest of them, so no slot is sent twice.

Pause and cancel also cancel ``queued`` occurrences (the send worker's CAS decides any race with a
send in progress); resume starts from the first occurrence after now, without backfilling the pause.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, time
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from scheduling.dispatch.quiet import QuietHoursError, parse_clock, parse_override
from scheduling.facade.names import SENDER_POOL_FIELD
from scheduling.lifecycle.schedules import LIFECYCLE_FIELDS, schedule_transition
from scheduling.messages.service import _body, _recipient, _sender, destination_allowed, fingerprint_of
from scheduling.models import Schedule, ScheduleStatus, ScheduleVersion
from scheduling.schedules.materialize import (
    MaterializeReport,
    naive,
    quiet_window_of,
    schedule_materialize_one,
    stored,
)
from scheduling.schedules.occurrences import kept_public, live_rows, occurrence_slot, occurrences_cancel
from scheduling.schedules.recurrence import ExpansionTooCostly, Recurrence, recurrence_build
from scheduling.schedules.rrules import RuleError
from smsgw.domain_errors import ConflictError, IdempotencyMismatch, InvalidInput, NotFoundError
from smsgw.models import Tenant
from smsgw.tenancy.priority import priority_for
from smsgw.values.timeutil import TimeResolutionError, parse_timezone

# The request fields that make up a definition (and each ScheduleVersion snapshot).
DEFINITION_FIELDS = (
    "to",
    "body",
    "from",
    SENDER_POOL_FIELD,
    "priority",
    "metadata",
    "validity_seconds",
    "rrule",
    "start",
    "timezone",
    "dst_policy",
    "exdate",
    "quiet_hours",
    "recipient_timezone",
)


@dataclass
class ScheduleChange:
    """What a change did to the occurrences, for the API response."""

    schedule: Schedule
    changed: bool = True
    replayed: bool = False  # the answer to a repeated Idempotency-Key: the schedule the first request made
    cancelled: list[str] = field(default_factory=list)
    kept: list[dict] = field(default_factory=list)
    materialized: MaterializeReport = field(default_factory=MaterializeReport)


@dataclass(frozen=True)
class _Definition:
    values: dict[str, Any]  # model fields
    snapshot: dict[str, Any]  # request-shaped, normalised
    recurrence: Recurrence


def _definition(tenant: Tenant, data: dict[str, Any], *, now: datetime) -> _Definition:
    """Validate a complete definition (request-shaped). Raises InvalidInput naming the field."""
    to = _recipient(data["to"])
    destination_allowed(tenant, to)
    encoding, segments = _body(data["body"])
    from_number, pool = _sender(tenant, data.get("from"), data.get(SENDER_POOL_FIELD))
    tz_name = data.get("timezone") or tenant.default_timezone or "UTC"
    try:
        rec = recurrence_build(
            rrule=data["rrule"],
            start=data["start"],
            tz_name=tz_name,
            dst_policy=data.get("dst_policy"),
            exdate=data.get("exdate") or [],
            now=now,
            max_per_day=settings.SCHEDULE_MAX_PER_DAY,
        )
        quiet = parse_override(data.get("quiet_hours"))
        recipient_tz = data.get("recipient_timezone") or ""
        if recipient_tz:
            try:
                parse_timezone(recipient_tz)
            except TimeResolutionError as exc:
                raise QuietHoursError("recipient_timezone", str(exc)) from exc
    except (RuleError, QuietHoursError) as exc:
        raise InvalidInput(exc.field, str(exc)) from exc
    exdate = sorted([d.isoformat() for d in rec.exdays] + [t.isoformat() for t in rec.exdates])
    priority = priority_for(tenant, data.get("priority"), default="transactional")
    validity = data.get("validity_seconds") or settings.DEFAULT_VALIDITY_SECONDS
    values = {
        "to": to,
        "body": data["body"],
        "encoding": encoding,
        "segments": segments,
        "from_number": from_number,
        "sender_pool": pool,
        "priority": priority,
        "metadata": data.get("metadata") or {},
        "validity_seconds": validity,
        "rrule": rec.text,
        "exdate": exdate,
        "start_local": stored(rec.start),
        "timezone": tz_name,
        "dst_policy": rec.dst_policy.value,
        "count_last_local": stored(rec.last_local),
        "quiet_hours": quiet,
        "recipient_timezone": recipient_tz,
    }
    snapshot = {
        "to": to,
        "body": data["body"],
        "from": from_number or None,
        SENDER_POOL_FIELD: pool or None,
        "priority": priority,
        "metadata": values["metadata"],
        "validity_seconds": validity,
        "rrule": rec.text,
        "start": rec.start.isoformat(),
        "timezone": tz_name,
        "dst_policy": rec.dst_policy.value,
        "exdate": exdate,
        "quiet_hours": quiet,
        "recipient_timezone": recipient_tz or None,
    }
    return _Definition(values, snapshot, rec)


def snapshot_of(schedule: Schedule) -> dict[str, Any]:
    """The schedule's current definition, request-shaped (what a PATCH is merged into)."""
    return {
        "to": schedule.to,
        "body": schedule.body,
        "from": schedule.from_number or None,
        SENDER_POOL_FIELD: schedule.sender_pool or None,
        "priority": schedule.priority,
        "metadata": schedule.metadata,
        "validity_seconds": schedule.validity_seconds,
        "rrule": schedule.rrule,
        "start": naive(schedule.start_local).isoformat(),
        "timezone": schedule.timezone,
        "dst_policy": schedule.dst_policy,
        "exdate": list(schedule.exdate or []),
        "quiet_hours": schedule.quiet_hours or {},
        "recipient_timezone": schedule.recipient_timezone or None,
    }


def _version_record(
    schedule: Schedule, *, change: str, actor: str, changed: list[str], now: datetime
) -> None:
    ScheduleVersion.objects.create(
        schedule=schedule,
        number=schedule.version,
        change=change,
        status=schedule.status,
        changed_fields=changed,
        definition=snapshot_of(schedule),
        actor=actor,
        created_at=now,
    )


def _start_cursor(schedule: Schedule, rec: Recurrence, *, after: datetime) -> str:
    """Point the cursor at the first occurrence after ``after``; returns the status that follows:
    active, or ended when no occurrence is left."""
    first = rec.first_after(after)
    if first is None:
        schedule.cursor_local = schedule.next_occurrence_at = None
        return ScheduleStatus.ENDED
    schedule.cursor_local, schedule.next_occurrence_at = stored(first.local), first.due_at
    return ScheduleStatus.ACTIVE


# What a service saves: the definition, its version and the cursor. The status and its stamps are
# written by the transitions alone (scheduling.lifecycle.schedules).
SAVED_FIELDS = [
    f.name for f in Schedule._meta.concrete_fields if not f.primary_key and f.name not in LIFECYCLE_FIELDS
]


def _save(schedule: Schedule) -> None:
    schedule.save(update_fields=SAVED_FIELDS)


def _move(schedule: Schedule, *, to_status: str, now: datetime, set_fields: dict | None = None) -> None:
    """The services hold the schedule's row locked, so the move cannot lose; should it all the same,
    the answer would describe a change that did not happen: a conflict instead."""
    if not schedule_transition(schedule, to_status=to_status, set_fields=set_fields, now=now):
        current = Schedule.objects.filter(pk=schedule.pk).values_list("status", flat=True).first()
        raise ConflictError(
            f"The schedule changed meanwhile; it is now {current}.", current_status=current or ""
        )


def _within_budget[**P, R](service: Callable[P, R]) -> Callable[P, R]:
    """A rule that passed ``recurrence_build`` can still run out of expansion budget in a later pass
    (the first occurrence after a resume, the first materialized window, a rule stored before the
    budget): the request is refused naming ``rrule`` and its transaction leaves nothing behind."""

    @functools.wraps(service)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return service(*args, **kwargs)
        except ExpansionTooCostly as exc:
            raise InvalidInput(exc.field, str(exc)) from exc

    return wrapper


@_within_budget
def schedule_create(
    *, tenant: Tenant, actor: str, data: dict[str, Any], idempotency_key: str | None = None
) -> ScheduleChange:
    """Validate and store a schedule, and make its first occurrences. With an ``idempotency_key`` already
    used by this tenant's schedules: that schedule (``replayed``), or IdempotencyMismatch when the body
    differs (docs/idempotency.md)."""
    fingerprint = fingerprint_of(data)
    if idempotency_key:
        existing = Schedule.objects.filter(tenant=tenant, idempotency_key=idempotency_key).first()
        if existing is not None:
            return _replay(existing, tenant, fingerprint)
    now = timezone.now()
    definition = _definition(tenant, data, now=now)
    schedule = Schedule(
        tenant=tenant,
        idempotency_key=idempotency_key or None,
        request_fingerprint=fingerprint,
        **definition.values,
    )
    # Born in its first status: a new row has no status to compare with.
    schedule.status = _start_cursor(schedule, definition.recurrence, after=now)
    schedule.ended_at = now if schedule.status == ScheduleStatus.ENDED else None
    try:
        with transaction.atomic():
            schedule.save()
            _version_record(schedule, change="created", actor=actor, changed=list(DEFINITION_FIELDS), now=now)
            report = schedule_materialize_one(schedule, now=now)
    except IntegrityError:
        # Two requests with one key raced: this insert waited on the unique key until the other one
        # committed, and failed. Its schedule is the answer; anything else is not a race to hide.
        if not idempotency_key:
            raise
        raced = Schedule.objects.filter(tenant=tenant, idempotency_key=idempotency_key).first()
        if raced is None:
            raise
        return _replay(raced, tenant, fingerprint)
    return ScheduleChange(schedule, materialized=report)


def _replay(existing: Schedule, tenant: Tenant, fingerprint: str) -> ScheduleChange:
    if existing.request_fingerprint != fingerprint:
        raise IdempotencyMismatch(
            "This Idempotency-Key was already used with a different request body; "
            "use a new key for a different schedule."
        )
    existing.tenant = tenant
    return ScheduleChange(existing, changed=False, replayed=True)


def schedule_get(*, tenant: Tenant, public_id: str, lock: bool = False) -> Schedule:
    # Tenant in the filter: another tenant's schedule is simply not found.
    qs = Schedule.objects.filter(tenant=tenant, public_id=public_id)
    if lock:
        qs = qs.select_for_update()
    schedule = qs.first()
    if schedule is None:
        raise NotFoundError("No schedule with this id.")
    schedule.tenant = tenant
    return schedule


@_within_budget
def schedule_update(*, tenant: Tenant, public_id: str, actor: str, data: dict[str, Any]) -> ScheduleChange:
    now = timezone.now()
    with transaction.atomic():
        schedule = schedule_get(tenant=tenant, public_id=public_id, lock=True)
        if schedule.status == ScheduleStatus.CANCELLED:
            raise ConflictError("A cancelled schedule cannot be changed.", current_status=schedule.status)
        base = snapshot_of(schedule)
        merged = {**base, **{k: v for k, v in data.items() if k in DEFINITION_FIELDS}}
        if "from" in data or SENDER_POOL_FIELD in data:
            # A new sender replaces the old one, whichever kind it was.
            merged["from"] = data.get("from")
            merged[SENDER_POOL_FIELD] = data.get(SENDER_POOL_FIELD)
        definition = _definition(tenant, merged, now=now)
        changed = sorted(k for k in DEFINITION_FIELDS if definition.snapshot[k] != base[k])
        if not changed:
            return ScheduleChange(schedule, changed=False)
        new_version = schedule.version + 1
        cancelled, kept = occurrences_cancel(
            schedule,
            now=now,
            actor=actor,
            reason=f"schedule {schedule.public_id} changed to version {new_version}",
            new_version=new_version,
            include_queued=False,
            only_future=True,
        )
        for name, value in definition.values.items():
            setattr(schedule, name, value)
        schedule.version = new_version
        status = schedule.status
        if status != ScheduleStatus.PAUSED:
            # Start after every slot that is still going out under an older version.
            after = max([now, *(row["_slot"] for row in kept)])
            status = _start_cursor(schedule, definition.recurrence, after=after)
        _save(schedule)
        if status != ScheduleStatus.PAUSED:
            _move(schedule, to_status=status, now=now)  # active, or ended when the new rule has nothing left
        _version_record(schedule, change="updated", actor=actor, changed=changed, now=now)
        report = schedule_materialize_one(schedule, now=now)
    return ScheduleChange(schedule, cancelled=cancelled, kept=kept_public(kept), materialized=report)


def schedule_pause(*, tenant: Tenant, public_id: str, actor: str) -> ScheduleChange:
    now = timezone.now()
    with transaction.atomic():
        schedule = schedule_get(tenant=tenant, public_id=public_id, lock=True)
        if schedule.status == ScheduleStatus.PAUSED:
            return ScheduleChange(schedule, changed=False)
        if schedule.status != ScheduleStatus.ACTIVE:
            raise ConflictError(
                f"Only an active schedule can be paused; this one is {schedule.status}.",
                current_status=schedule.status,
            )
        change = _schedule_stop(
            schedule,
            status=ScheduleStatus.PAUSED,
            change="paused",
            reason=f"paused (version {schedule.version + 1})",
            actor=actor,
            now=now,
        )
    return change


@_within_budget
def schedule_resume(*, tenant: Tenant, public_id: str, actor: str) -> ScheduleChange:
    from scheduling.schedules.materialize import recurrence_of

    now = timezone.now()
    with transaction.atomic():
        schedule = schedule_get(tenant=tenant, public_id=public_id, lock=True)
        if schedule.status == ScheduleStatus.ACTIVE:
            return ScheduleChange(schedule, changed=False)
        if schedule.status != ScheduleStatus.PAUSED:
            raise ConflictError(
                f"Only a paused schedule can be resumed; this one is {schedule.status}.",
                current_status=schedule.status,
            )
        live = live_rows(schedule, now)
        after = max([now, *(occurrence_slot(r) for r in live)])
        schedule.version += 1
        status = _start_cursor(schedule, recurrence_of(schedule), after=after)
        _save(schedule)
        _move(schedule, to_status=status, now=now)
        _version_record(schedule, change="resumed", actor=actor, changed=["status"], now=now)
        report = schedule_materialize_one(schedule, now=now)
    return ScheduleChange(schedule, materialized=report)


def schedule_cancel(*, tenant: Tenant, public_id: str, actor: str) -> ScheduleChange:
    now = timezone.now()
    with transaction.atomic():
        schedule = schedule_get(tenant=tenant, public_id=public_id, lock=True)
        if schedule.status == ScheduleStatus.CANCELLED:
            return ScheduleChange(schedule, changed=False)
        change = _schedule_stop(
            schedule,
            status=ScheduleStatus.CANCELLED,
            change="cancelled",
            reason="cancelled",
            actor=actor,
            now=now,
        )
    return change


def _schedule_stop(
    schedule: Schedule, *, status: str, change: str, reason: str, actor: str, now
) -> ScheduleChange:
    """Pause and cancel: a new version that cancels every pending occurrence (queued ones too) and
    stops the materializer cursor. Runs inside the caller's transaction, with the schedule locked."""
    new_version = schedule.version + 1
    cancelled, kept = occurrences_cancel(
        schedule,
        now=now,
        actor=actor,
        reason=f"schedule {schedule.public_id} {reason}",
        new_version=new_version,
        include_queued=True,
        only_future=False,
    )
    _move(
        schedule,
        to_status=status,
        now=now,
        set_fields={"version": new_version, "cursor_local": None, "next_occurrence_at": None},
    )
    _version_record(schedule, change=change, actor=actor, changed=["status"], now=now)
    return ScheduleChange(schedule, cancelled=cancelled, kept=kept_public(kept))


def tenant_quiet_hours_set(*, tenant: Tenant, data: dict[str, Any]) -> Tenant:
    """Set the tenant's quiet-hours policy; ``start`` and ``end`` both None clears the window."""
    start, end = data.get("start"), data.get("end")
    start_t: time | None
    end_t: time | None
    try:
        if (start is None) != (end is None):
            raise QuietHoursError("end" if end is None else "start", "give both start and end, or neither")
        if start is not None:
            start_t, end_t = parse_clock(start, "start"), parse_clock(end, "end")
            if start_t == end_t:
                raise QuietHoursError(
                    "end", f"equals start ({start_t:%H:%M}): the window would be empty or the whole day"
                )
        else:
            start_t = end_t = None
    except QuietHoursError as exc:
        raise InvalidInput(exc.field, str(exc)) from exc
    tenant.quiet_hours_start, tenant.quiet_hours_end = start_t, end_t
    if data.get("exempt_transactional") is not None:
        tenant.quiet_hours_exempt_transactional = bool(data["exempt_transactional"])
    tenant.save(update_fields=["quiet_hours_start", "quiet_hours_end", "quiet_hours_exempt_transactional"])
    return tenant


__all__ = [
    "DEFINITION_FIELDS",
    "ScheduleChange",
    "quiet_window_of",
    "schedule_cancel",
    "schedule_create",
    "schedule_get",
    "schedule_pause",
    "schedule_resume",
    "schedule_update",
    "snapshot_of",
    "tenant_quiet_hours_set",
]
