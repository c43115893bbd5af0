"""A schedule's occurrences already made (ordinary Messages): the live ones read by their key range, and
those a change, a pause or a cancel calls off (cancelled through ``scheduling.lifecycle.transitions``,
each with a timeline entry naming the new version) or leaves alone (already due, queued or further:
reported, with a timeline note saying why the old definition still went out)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, TypedDict

from scheduling.lifecycle import transitions
from scheduling.models import Message, Schedule, Status
from scheduling.schedules.materialize import naive
from smsgw.values.timeutil import utc_text

# How far back a slot of a still-live occurrence can lie (a quiet-hours move is under a day); bounds
# the occurrence-key range read when a version starts, instead of reading the schedule's history.
LIVE_LOOKBACK = timedelta(days=3)
IN_FLIGHT = (Status.QUEUED, Status.SENDING)
ROW_FIELDS = (
    "id",
    "public_id",
    "status",
    "due_at",
    "quiet_deferred_from",
    "requested_local_time",
    "schedule_version",
)


class OccurrenceRow(TypedDict):
    """One ``ROW_FIELDS`` row of a schedule's occurrence (``Message.objects.values(...)``)."""

    id: int
    public_id: str
    status: str
    due_at: datetime
    quiet_deferred_from: datetime | None
    requested_local_time: datetime | None
    schedule_version: int | None


def occurrence_slot(row: OccurrenceRow) -> datetime:
    # The occurrence's own time: a quiet-hours move changes due_at but not the slot it stands for.
    return row["quiet_deferred_from"] or row["due_at"]


def live_rows(schedule: Schedule, now: datetime) -> list[OccurrenceRow]:
    """This schedule's occurrences not cancelled and not final, from LIVE_LOOKBACK ago on (keys sort
    by local occurrence time, so the range read uses the unique key index)."""
    since = (now - LIVE_LOOKBACK).replace(tzinfo=None)
    return list(
        Message.objects.filter(
            schedule=schedule,
            occurrence_key__gte=f"{schedule.public_id}:{since:%Y%m%dT%H%M%S}",
            status__in=[Status.SCHEDULED, *IN_FLIGHT],
        ).values(*ROW_FIELDS)
    )


def occurrences_cancel(
    schedule: Schedule,
    *,
    now: datetime,
    actor: str,
    reason: str,
    new_version: int,
    include_queued: bool,
    only_future: bool,
) -> tuple[list[str], list[dict]]:
    """Cancel this schedule's pending occurrences; returns (cancelled public ids, kept rows)."""
    rows = live_rows(schedule, now) if only_future else _all_pending_rows(schedule)
    by_id = {r["id"]: r for r in rows}
    details = {
        "reason": reason,
        "schedule": schedule.public_id,
        "schedule_version": schedule.version,
        "new_schedule_version": new_version,
    }
    common: dict[str, Any] = {
        "to_status": Status.CANCELLED,
        "kind": "cancelled",
        "actor": actor,
        "details": details,
        "set_fields": {"run_after": None, "status_reason": reason[:255]},
        "now": now,
    }
    scheduled = [
        r["id"]
        for r in rows
        if r["status"] == Status.SCHEDULED and (not only_future or occurrence_slot(r) > now)
    ]
    won = {r["id"] for r in transitions.transition_many(scheduled, from_status=Status.SCHEDULED, **common)}
    if include_queued:
        queued = [r["id"] for r in rows if r["status"] == Status.QUEUED]
        won |= {r["id"] for r in transitions.transition_many(queued, from_status=Status.QUEUED, **common)}
    kept_ids = [mid for mid in by_id if mid not in won]
    current = dict(Message.objects.filter(pk__in=kept_ids).values_list("id", "status"))
    kept = []
    for mid in kept_ids:
        row = by_id[mid]
        local_time = naive(row["requested_local_time"])
        assert local_time is not None  # every occurrence records its local time (materialize)
        kept.append(
            {
                "id": row["public_id"],
                "status": current.get(mid, row["status"]),
                "local_time": local_time.isoformat(),
                "due_at": utc_text(row["due_at"]),
                "schedule_version": row["schedule_version"],
                "_pk": mid,
                "_slot": occurrence_slot(row),
            }
        )
        # The audit trail answers "why did this still go out with the old definition?".
        transitions.event_record(
            mid,
            kind="schedule_change_not_applied",
            actor=actor,
            status=current.get(mid, row["status"]),
            details={**details, "reason": f"already {current.get(mid, row['status'])} when: {reason}"},
        )
    return [by_id[mid]["public_id"] for mid in sorted(won)], kept


def _all_pending_rows(schedule: Schedule) -> list[OccurrenceRow]:
    return list(
        Message.objects.filter(schedule=schedule, status__in=[Status.SCHEDULED, *IN_FLIGHT]).values(
            *ROW_FIELDS
        )
    )


def kept_public(kept: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith("_")} for row in kept]
