"""The one writer of a recurring schedule's status.

Like a message's (scheduling.lifecycle.transitions), every change is a compare-and-set on the status it was
read with, and each edge writes its own timestamps. The services lock the schedule row before they change it,
and the materializer claims rows SKIP LOCKED, so a transition that does not move means the row changed under a
caller that did not hold it: the caller says so instead of writing over it.

The schedule's ``version`` is its definition's version (occurrences name the one they were made
under): a caller bumps it when the definition or the status changes, not this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.utils import timezone

from scheduling.lifecycle.transitions import NOW, TransitionNotAllowed
from scheduling.models import Schedule, ScheduleStatus

S = ScheduleStatus
# Every allowed edge and the timestamps it writes (NOW: the move's time; None: emptied).
EDGES: dict[tuple[str, str], dict[str, object]] = {
    (S.ACTIVE, S.ACTIVE): {},  # an edit that leaves occurrences to make
    (S.ACTIVE, S.ENDED): {"ended_at": NOW},  # no occurrence left (COUNT/UNTIL reached, or an edit)
    (S.ENDED, S.ACTIVE): {"ended_at": None},  # an edit gave it occurrences again
    (S.ENDED, S.ENDED): {"ended_at": NOW},  # an edit that still leaves none: ended as of that edit
    (S.ACTIVE, S.PAUSED): {"paused_at": NOW},
    (S.PAUSED, S.ACTIVE): {"paused_at": None, "ended_at": None},
    (S.PAUSED, S.ENDED): {"paused_at": None, "ended_at": NOW},  # resumed with no occurrence left
    (S.ACTIVE, S.CANCELLED): {"cancelled_at": NOW},
    (S.PAUSED, S.CANCELLED): {"cancelled_at": NOW},
    (S.ENDED, S.CANCELLED): {"cancelled_at": NOW},
}
ALLOWED: frozenset[tuple[str, str]] = frozenset(EDGES)
# What a caller may set along with the status: the new version and the materializer's cursor.
SETTABLE = frozenset({"version", "cursor_local", "next_occurrence_at"})
# The columns only a transition writes: a service's save() of the definition leaves them alone.
LIFECYCLE_FIELDS = frozenset({"status", "paused_at", "ended_at", "cancelled_at"})


def _stamps(from_status: str, to_status: str, now: datetime) -> dict[str, Any]:
    if (from_status, to_status) not in ALLOWED:
        raise TransitionNotAllowed(f"schedule {from_status} -> {to_status}")
    return {
        column: now if value is NOW else value for column, value in EDGES[(from_status, to_status)].items()
    }


def schedule_transition(
    schedule: Schedule,
    *,
    to_status: str,
    set_fields: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> bool:
    """Move the schedule from the status it was read with to ``to_status``. Returns whether it moved; a
    schedule that moved shows its new state without a reload, one that did not is left as it was read."""
    now = now or timezone.now()
    unknown = set(set_fields or {}) - SETTABLE
    if unknown:
        raise ValueError(f"not settable by a schedule transition: {sorted(unknown)}")
    fields = _stamps(schedule.status, to_status, now) | (set_fields or {})
    moved = Schedule.objects.filter(pk=schedule.pk, status=schedule.status).update(
        status=to_status, updated_at=now, **fields
    )
    if moved:
        for column, value in {**fields, "status": to_status, "updated_at": now}.items():
            setattr(schedule, column, value)
    return moved == 1


def schedules_end(schedules: Sequence[Schedule], *, now: datetime) -> int:
    """``active`` -> ``ended`` for each of these schedules still active (the materializer found no
    occurrence left), in one statement. Returns how many moved; those show their new state."""
    if not schedules:
        return 0
    fields = _stamps(S.ACTIVE, S.ENDED, now)
    ids = [s.pk for s in schedules]
    moved = Schedule.objects.filter(pk__in=ids, status=S.ACTIVE).update(
        status=S.ENDED, updated_at=now, **fields
    )
    ended = (
        set(ids)
        if moved == len(ids)
        else set(
            Schedule.objects.filter(pk__in=ids, status=S.ENDED, ended_at=now).values_list("pk", flat=True)
        )
    )
    for s in schedules:
        if s.pk in ended:
            s.status, s.ended_at, s.updated_at = S.ENDED, now, now
    return moved
