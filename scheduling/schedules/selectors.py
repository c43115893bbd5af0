"""Reads behind the schedules API. Every query starts from the tenant (through ``schedule_get``)."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from scheduling.messages.selectors import instant_in_range, recipient_param
from scheduling.models import Message, Schedule, ScheduleStatus, ScheduleVersion
from scheduling.schedules.materialize import occurrence_key, quiet_window_of, recurrence_of
from scheduling.schedules.recurrence import ExpansionTooCostly
from smsgw.domain_errors import InvalidInput

PREVIEW_DEFAULT = 10
PREVIEW_MAX = 1000


def schedule_list(*, tenant, params) -> QuerySet[Schedule]:
    qs = Schedule.objects.filter(tenant=tenant)
    if params.get("status"):
        statuses = [s.strip() for s in params["status"].split(",") if s.strip()]
        bad = [s for s in statuses if s not in ScheduleStatus.values]
        if bad:
            raise InvalidInput(
                "status", f"unknown status {bad[0]!r}; one of {', '.join(ScheduleStatus.values)}"
            )
        qs = qs.filter(status__in=statuses)
    if params.get("to"):
        qs = qs.filter(to=recipient_param(params["to"]))
    return qs


def schedule_versions(*, schedule: Schedule) -> QuerySet[ScheduleVersion]:
    return schedule.versions.order_by("number")


def schedule_messages(*, schedule: Schedule) -> QuerySet[Message]:
    """The occurrences made so far (any version, any status), but those the tenant deleted."""
    return Message.objects.filter(schedule=schedule, tenant_id=schedule.tenant_id, deleted_at__isnull=True)


def _preview_params(params) -> tuple[int, datetime]:
    raw = params.get("count", str(PREVIEW_DEFAULT))
    # isascii: str.isdigit() accepts "²" and other digits int() refuses (a 500 before).
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 6 or not 1 <= int(raw) <= PREVIEW_MAX:
        raise InvalidInput("count", f"must be a whole number from 1 to {PREVIEW_MAX}")
    after = timezone.now()
    if params.get("after"):
        try:
            # ASCII: parse_datetime's fallback pattern reads any Unicode digit (\d) as int() does.
            parsed = parse_datetime(params["after"]) if params["after"].isascii() else None
        except ValueError:  # well formed but impossible, e.g. month 13
            parsed = None
        if parsed is None or parsed.tzinfo is None or not instant_in_range(parsed):
            raise InvalidInput("after", "must be an ISO 8601 time with an offset, e.g. 2026-12-01T09:00:00Z")
        after = parsed
    return int(raw), after


def schedule_preview(*, schedule: Schedule, params) -> list[dict]:
    """The next ``count`` occurrences after ``after`` (default now) in local time and UTC, with the
    DST decision, the quiet-hours move the tenant's current policy would make, and the message already
    made for it (if any). Computed from the rule, never stored; the rule restarts near ``after``, so the
    cost is the ``count`` occurrences, not the schedule's age."""
    count, after = _preview_params(params)
    if schedule.status in (ScheduleStatus.CANCELLED, ScheduleStatus.ENDED):
        return []
    try:
        items, keys = _preview_items(schedule, after, count)
    except ExpansionTooCostly as exc:  # a rule stored before the budget existed
        raise InvalidInput(exc.field, str(exc)) from exc
    made = {
        row["occurrence_key"]: row
        for row in Message.objects.filter(schedule=schedule, occurrence_key__in=keys).values(
            "occurrence_key", "public_id", "status", "due_at"
        )
    }
    for item, key in zip(items, keys, strict=True):
        if key in made:
            row = made[key]
            item["message"] = {"id": row["public_id"], "status": row["status"]}
            item["due_at"] = row["due_at"]
    return items


def _preview_items(schedule: Schedule, after: datetime, count: int) -> tuple[list[dict], list[str]]:
    rec = recurrence_of(schedule)
    window = quiet_window_of(schedule, schedule.tenant)
    items, keys = [], []
    for occ in rec.after(after):
        key = occurrence_key(schedule, occ.local)
        moved = window.defer(occ.due_at) if window else None
        item = {
            "local_time": occ.local.isoformat(),
            "timezone": schedule.timezone,
            "occurrence_at": occ.due_at,
            "dst_adjustment": occ.adjustment.value,
            "due_at": moved or occ.due_at,
            "quiet_hours_moved": moved is not None,
            "message": None,
        }
        if occ.adjustment.value != "none":
            item["dst_note"] = occ.resolved.describe()
        items.append(item)
        keys.append(key)
        if len(items) >= count:
            break
    return items, keys
