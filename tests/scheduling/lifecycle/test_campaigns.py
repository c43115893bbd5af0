"""Campaign status moves only by compare-and-set (scheduling.lifecycle.campaigns): a move from a status
the campaign is no longer in changes nothing, and each edge writes its own timestamp."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.campaigns import control as campaign_control
from scheduling.campaigns import make as campaign_make
from scheduling.lifecycle.campaigns import campaign_transition
from scheduling.lifecycle.transitions import TransitionNotAllowed
from scheduling.models import Campaign, CampaignStatus
from tests.factories import campaign_with_messages, tenant_with_key

# SQLite half too: the transitions' SQL has a SQLite form.
pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]
C = CampaignStatus


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


def state(campaign: Campaign) -> tuple:
    return tuple(
        Campaign.objects.filter(pk=campaign.pk)
        .values_list("status", "version", "paused_at", "cancelled_at", "completed_at", "status_reason")
        .get()
    )


def test_a_campaign_transition_from_a_status_it_is_not_in_does_not_move(tenant):
    campaign, _ = campaign_with_messages(tenant, 1)  # active
    before = state(campaign)
    assert not campaign_transition(campaign, from_status=C.PAUSED, to_status=C.ACTIVE)
    assert not campaign_transition(
        campaign.pk, from_status=C.CREATING, to_status=C.FAILED, set_fields={"status_reason": "x"}
    )
    assert state(campaign) == before
    assert (campaign.status, campaign.version) == (C.ACTIVE, before[1])  # the instance as it was read


def test_a_disallowed_campaign_edge_raises(tenant):
    campaign, _ = campaign_with_messages(tenant, 1, status=C.COMPLETED)
    with pytest.raises(TransitionNotAllowed):
        campaign_transition(campaign, from_status=C.COMPLETED, to_status=C.ACTIVE)
    with pytest.raises(ValueError, match="not settable"):
        campaign_transition(campaign, from_status=C.ACTIVE, to_status=C.PAUSED, set_fields={"name": "x"})
    assert state(campaign)[0] == C.COMPLETED


def test_each_campaign_edge_stamps_its_own_time(tenant):
    campaign, _ = campaign_with_messages(tenant, 1)
    version = campaign.version
    paused = timezone.now() - timedelta(minutes=2)
    assert campaign_transition(campaign, from_status=C.ACTIVE, to_status=C.PAUSED, now=paused)
    assert state(campaign) == (C.PAUSED, version + 1, paused, None, None, "")
    assert (campaign.status, campaign.paused_at, campaign.version) == (C.PAUSED, paused, version + 1)

    resumed = paused + timedelta(minutes=1)
    assert campaign_transition(campaign.pk, from_status=C.PAUSED, to_status=C.ACTIVE, now=resumed)
    assert state(campaign) == (C.ACTIVE, version + 2, None, None, None, "")

    done = resumed + timedelta(minutes=1)
    assert campaign_transition(campaign.pk, from_status=C.ACTIVE, to_status=C.COMPLETED, now=done)
    assert state(campaign) == (C.COMPLETED, version + 3, None, None, done, "")


def test_the_service_answers_with_the_moved_campaign(tenant):
    campaign, _ = campaign_with_messages(tenant, 2)
    change = campaign_control.campaign_cancel(tenant=tenant, public_id=campaign.public_id, actor="t")
    row = Campaign.objects.get(pk=campaign.pk)
    assert change.changed and change.campaign.status == row.status == C.CANCELLED
    assert row.cancelled_at is not None and row.version == campaign.version + 1


def test_a_creation_job_finishing_after_a_cancel_does_not_reopen_the_campaign(tenant):
    campaign, _ = campaign_with_messages(tenant, 1, status=C.CREATING, made=False)
    assert campaign_transition(campaign, from_status=C.CREATING, to_status=C.CANCELLED)
    report = campaign_make.MakeReport()
    campaign_make._finish(campaign.pk, report)
    row = Campaign.objects.get(pk=campaign.pk)
    assert (report.stopped, row.status, row.version) == (C.CANCELLED, C.CANCELLED, campaign.version)
    assert row.made_at is not None  # the list was read to its end all the same
