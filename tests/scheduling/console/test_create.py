"""Creating a message from the console: the form, a preview (the resolved UTC time, segments, sender
and route) that stores nothing, and the confirmation, which stores it through the API's own create with
the operator as actor; a recurrence makes a schedule; the API's refusals are shown on their field."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from scheduling.models import Message, MessageEvent, Schedule
from smsgw.console.roles import roles_sync
from tests.factories import tenant_with_key

pytestmark = pytest.mark.django_db

CREATE = "/admin/scheduling/message/create/"
NEW_YORK = ZoneInfo("America/New_York")


@pytest.fixture
def ops(db):
    user = User.objects.create_superuser("ops", "ops@example.com", "pw-for-tests-only")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme", default_timezone="America/New_York")[0]


def _local_nine(days: int = 2) -> datetime:
    day = (timezone.now().astimezone(NEW_YORK) + timedelta(days=days)).date()
    return datetime(day.year, day.month, day.day, 9, 0)


def _form(tenant, **extra) -> dict:
    return {
        "tenant": str(tenant.pk),
        "to": "+14155550123",
        "body": "x" * 170,  # two GSM-7 segments
        "local_time": _local_nine().strftime("%Y-%m-%dT%H:%M"),
        "timezone": "America/New_York",
        "token": "t0k3n",
        **extra,
    }


def test_preview_shows_the_resolved_time_and_segments_then_the_confirmation_creates_it(ops, tenant):
    assert ops.get("/admin/scheduling/message/").content.decode().count(CREATE) == 1
    assert ops.get(CREATE).status_code == 200
    preview = ops.post(CREATE, _form(tenant, preview="Preview")).content.decode()
    due = _local_nine().replace(tzinfo=NEW_YORK).astimezone(ZoneInfo("UTC"))
    assert f"{due:%Y-%m-%d %H:%M:%S} UTC (America/New_York)" in preview
    assert "2 (GSM-7)" in preview and "default (provider" in preview
    assert 'id="confirm-create"' in preview
    assert not Message.objects.exists()  # a preview stores nothing

    done = ops.post(CREATE, _form(tenant, confirm="Confirm and create"), follow=True)
    msg = Message.objects.get()
    assert done.redirect_chain[-1][0] == f"/admin/scheduling/message/{msg.pk}/change/"
    assert (msg.to, msg.segments, msg.due_at, msg.status, msg.tenant_id) == (
        "+14155550123",
        2,
        due,
        "scheduled",
        tenant.pk,
    )
    created = MessageEvent.objects.get(message=msg, kind="created")
    assert created.actor == "admin:ops"
    # The confirmation sent twice (a double click, a reload): still one message.
    ops.post(CREATE, _form(tenant, confirm="Confirm and create"))
    assert Message.objects.count() == 1


def test_the_apis_refusals_are_shown_on_their_field_and_nothing_is_stored(ops, tenant):
    page = ops.post(CREATE, _form(tenant, to="12", preview="Preview")).content.decode()
    assert "to:" in page and 'id="confirm-create"' not in page
    past = (timezone.now().astimezone(NEW_YORK) - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    page = ops.post(CREATE, _form(tenant, local_time=past, confirm="yes")).content.decode()
    assert "send_at:" in page
    assert not Message.objects.exists()


def test_a_recurrence_previews_its_next_sends_and_makes_a_schedule(ops, tenant):
    form = _form(tenant, rrule="FREQ=DAILY;COUNT=3", preview="Preview")
    page = ops.post(CREATE, form).content.decode()
    first = _local_nine().replace(tzinfo=NEW_YORK).astimezone(ZoneInfo("UTC"))
    for day in range(3):
        assert f"{first + timedelta(days=day):%Y-%m-%d %H:%M:%S}" in page
    ops.post(CREATE, {**form, "confirm": "Confirm and create"})
    schedule = Schedule.objects.get()
    assert (schedule.rrule, schedule.timezone, schedule.tenant_id) == (
        "FREQ=DAILY;COUNT=3",
        "America/New_York",
        tenant.pk,
    )
    assert (
        schedule.next_occurrence_at == first
        or Message.objects.filter(schedule=schedule, due_at=first).exists()
    )


def test_only_roles_that_act_may_create(tenant):
    roles_sync(apps)
    viewer = User.objects.create_user("vera", password="pw-for-tests-only", is_staff=True)
    viewer.groups.add(Group.objects.get(name="viewer"))
    client = Client()
    client.force_login(viewer)
    assert client.get(CREATE).status_code == 403
    assert client.post(CREATE, _form(tenant, confirm="yes")).status_code == 403
    assert CREATE not in client.get("/admin/scheduling/message/").content.decode()
    assert not Message.objects.exists()
