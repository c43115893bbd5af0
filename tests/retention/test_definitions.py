"""Campaigns and schedules that are over lose their content at the content horizon (body, template,
rejected rows' numbers; a schedule's recipient and body in every version) and their record at the record
horizon, once no live message points at them; open ones are never touched."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from retention.definitions import definitions_content_remove, definitions_prune
from retention.models import TenantRetention
from scheduling.models import Campaign, CampaignError, Message, Schedule, ScheduleVersion
from tests.factories import message, tenant_with_key

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]


def _campaign(tenant, status, days_ago):
    c = Campaign.objects.create(tenant=tenant, status=status, body="Hi {name}", validity_seconds=3600)
    CampaignError.objects.create(
        campaign=c, line=2, phone="+14155550199", field="phone", code="x", message="x"
    )
    Campaign.objects.filter(pk=c.pk).update(updated_at=timezone.now() - timedelta(days=days_ago))
    return c


def _schedule(tenant, status, days_ago):
    s = Schedule.objects.create(
        tenant=tenant,
        status=status,
        to="+14155550123",
        body="weekly",
        encoding="GSM-7",
        segments=1,
        validity_seconds=3600,
        rrule="FREQ=WEEKLY",
        start_local=datetime(2026, 1, 1, 9, tzinfo=UTC),
        timezone="UTC",
    )
    ScheduleVersion.objects.create(
        schedule=s,
        number=1,
        change="created",
        status=status,
        definition={"to": "+14155550123"},
        actor="t",
        created_at=timezone.now(),
    )
    Schedule.objects.filter(pk=s.pk).update(updated_at=timezone.now() - timedelta(days=days_ago))
    return s


def test_content_goes_at_the_horizon_and_open_ones_stay():
    tenant, _ = tenant_with_key()
    old = _campaign(tenant, "completed", 31)
    recent = _campaign(tenant, "completed", 29)
    active = _campaign(tenant, "active", 400)
    ended = _schedule(tenant, "ended", 31)
    running = _schedule(tenant, "active", 400)

    done = definitions_content_remove(now=timezone.now())

    assert done == {"campaign": 1, "campaignerror": 1, "schedule": 1, "scheduleversion": 1}
    assert Campaign.objects.get(pk=old.pk).body == ""
    assert list(CampaignError.objects.filter(campaign=old).values_list("phone", flat=True)) == [""]
    for kept in (recent, active):
        assert Campaign.objects.get(pk=kept.pk).body == "Hi {name}"
        assert CampaignError.objects.get(campaign=kept).phone == "+14155550199"
    s = Schedule.objects.get(pk=ended.pk)
    assert (s.body, "*" in s.to) == ("", True)
    assert ScheduleVersion.objects.get(schedule=ended).definition == {}
    assert Schedule.objects.get(pk=running.pk).body == "weekly"
    assert definitions_content_remove(now=timezone.now()) == {}  # a repeat finds nothing


def test_records_go_at_the_tenants_horizon_once_no_live_message_points_at_them():
    tenant, _ = tenant_with_key()
    TenantRetention.objects.create(tenant=tenant, record_days=10)
    gone = _campaign(tenant, "cancelled", 11)
    held = _campaign(tenant, "completed", 11)
    m = message(tenant, status="delivered")
    Message.objects.filter(pk=m.pk).update(campaign=held)
    other, _ = tenant_with_key("other")
    default = _campaign(other, "completed", 11)  # the default record horizon: 365 days
    ended = _schedule(tenant, "cancelled", 11)

    done = definitions_prune(now=timezone.now())

    assert done["campaign"] == 1 and done["schedule"] == 1
    assert not Campaign.objects.filter(pk=gone.pk).exists()
    assert not CampaignError.objects.filter(campaign_id=gone.pk).exists()
    assert Campaign.objects.filter(pk__in=[held.pk, default.pk]).count() == 2
    assert not Schedule.objects.filter(pk=ended.pk).exists()
    assert not ScheduleVersion.objects.filter(schedule_id=ended.pk).exists()
