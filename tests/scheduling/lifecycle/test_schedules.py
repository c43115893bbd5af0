"""Schedule status moves only by compare-and-set (scheduling.lifecycle.schedules): a move from a status
the schedule is no longer in changes nothing, and each edge writes its own timestamps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from scheduling.lifecycle.schedules import schedule_transition, schedules_end
from scheduling.lifecycle.transitions import TransitionNotAllowed
from scheduling.models import Schedule, ScheduleStatus
from scheduling.schedules.materialize import schedules_materialize
from tests.factories import RECIPIENT

# SQLite half too: the transitions' SQL has a SQLite form.
pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]
S = ScheduleStatus


def create(api, **fields) -> Schedule:
    start = (timezone.now() + timedelta(hours=1)).replace(second=0, microsecond=0, tzinfo=None)
    body = {
        "to": RECIPIENT,
        "body": "Take your medicine",
        "rrule": "FREQ=HOURLY;INTERVAL=6",
        "start": start.isoformat(),
        "timezone": "UTC",
        **fields,
    }
    resp = api.post("/v1/schedules", body, format="json")
    assert resp.status_code == 201, resp.content
    return Schedule.objects.get(public_id=resp.json()["id"])


def stamps(schedule: Schedule) -> tuple:
    return tuple(
        Schedule.objects.filter(pk=schedule.pk)
        .values_list("status", "version", "paused_at", "ended_at", "cancelled_at")
        .get()
    )


def test_a_schedule_transition_from_a_status_it_is_no_longer_in_does_not_move(api):
    schedule = create(api)
    stale = Schedule.objects.get(pk=schedule.pk)  # read while active
    assert api.post(f"/v1/schedules/{schedule.public_id}/pause").status_code == 200
    before = stamps(schedule)
    assert not schedule_transition(stale, to_status=S.CANCELLED, set_fields={"version": 99})
    assert stamps(schedule) == before and before[0] == S.PAUSED
    assert (stale.status, stale.cancelled_at) == (S.ACTIVE, None)


def test_a_disallowed_schedule_edge_raises(api):
    schedule = create(api)
    schedule.status = S.ENDED  # only an active schedule can be paused
    with pytest.raises(TransitionNotAllowed):
        schedule_transition(schedule, to_status=S.PAUSED)
    schedule.status = S.CANCELLED
    with pytest.raises(TransitionNotAllowed):
        schedule_transition(schedule, to_status=S.ACTIVE)
    with pytest.raises(ValueError, match="not settable"):
        schedule_transition(
            Schedule.objects.get(pk=schedule.pk), to_status=S.PAUSED, set_fields={"rrule": ""}
        )


def test_each_schedule_edge_stamps_its_own_time(api):
    schedule = create(api)
    version = schedule.version
    now = timezone.now() - timedelta(minutes=5)
    assert schedule_transition(schedule, to_status=S.PAUSED, now=now)
    assert stamps(schedule) == (S.PAUSED, version, now, None, None)  # the version is the caller's to bump
    assert (schedule.status, schedule.paused_at) == (S.PAUSED, now)
    later = now + timedelta(minutes=1)
    assert schedule_transition(schedule, to_status=S.ENDED, now=later)  # resumed with nothing left
    assert stamps(schedule) == (S.ENDED, version, None, later, None)
    assert schedule_transition(
        schedule, to_status=S.CANCELLED, set_fields={"version": version + 1}, now=later
    )
    assert stamps(schedule) == (S.CANCELLED, version + 1, None, later, later)


def test_the_services_move_the_status_through_the_transitions(api):
    schedule = create(api)
    sid = schedule.public_id
    api.post(f"/v1/schedules/{sid}/pause")
    paused = stamps(schedule)
    assert paused[0] == S.PAUSED and paused[2] is not None and paused[1] == schedule.version + 1
    api.post(f"/v1/schedules/{sid}/resume")
    assert stamps(schedule)[0::2] == (S.ACTIVE, None, None)
    api.post(f"/v1/schedules/{sid}/cancel")
    cancelled = stamps(schedule)
    assert cancelled[0] == S.CANCELLED and cancelled[4] is not None


def test_the_materializer_ends_a_schedule_with_nothing_left(api):
    schedule = create(api, rrule="FREQ=DAILY;COUNT=2", start="2027-01-10T09:00:00")
    now = datetime(2027, 1, 11, tzinfo=UTC)
    report = schedules_materialize(now=now)
    assert report.ended == 1
    assert stamps(schedule)[0::3] == (S.ENDED, now)
    assert schedules_end([Schedule.objects.get(pk=schedule.pk)], now=now + timedelta(days=1)) == 0
    assert stamps(schedule)[3] == now  # already ended: not ended again
