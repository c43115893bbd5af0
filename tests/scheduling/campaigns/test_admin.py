"""The campaign console: progress from the counters in the list and on the detail page, a link to the
campaign's messages, and pause / resume / cancel actions through the API's services, recorded in the
admin log; a viewer sees campaigns and changes nothing."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, User
from django.test import Client

from scheduling.models import Campaign, CampaignError, Message, Status
from smsgw.console.roles import roles_sync
from tests.factories import campaign_with_messages, message, tenant_with_key

pytestmark = pytest.mark.django_db
CHANGELIST = "/admin/scheduling/campaign/"


def staff(role: str) -> Client:
    roles_sync(apps)
    user = User.objects.create_user(role, f"{role}@example.com", "pw-for-tests-only-1", is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


def test_list_shows_progress_from_the_counters(tenant):
    campaign, _ = campaign_with_messages(tenant, 7)
    empty, _ = campaign_with_messages(tenant, 0, status="creating", made=False)
    page = staff("viewer").get(CHANGELIST).content.decode()
    assert campaign.public_id in page and "7 total: 7 scheduled" in page
    assert empty.public_id in page and "no messages yet" in page


def test_detail_shows_progress_rejected_rows_and_links_to_the_messages(tenant):
    campaign, ids = campaign_with_messages(tenant, 3)
    CampaignError.objects.create(
        campaign=campaign, line=4, phone="+14155550123", field="phone", code="invalid_number", message="bad"
    )
    lone = message(tenant)  # not the campaign's
    client = staff("viewer")
    page = client.get(f"{CHANGELIST}{campaign.pk}/change/").content.decode()
    assert "<td>scheduled</td><td>3</td>" in page
    assert "line 4: phone invalid_number (bad)" in page and "+14155550123" not in page
    link = f"/admin/scheduling/message/?campaign__id__exact={campaign.pk}"
    assert link.replace("&", "&amp;") in page
    listed = client.get(link).content.decode()
    assert all(Message.objects.get(pk=i).public_id in listed for i in ids)
    assert lone.public_id not in listed


def test_operator_pauses_resumes_and_cancels_audited(tenant):
    campaign, ids = campaign_with_messages(tenant, 4)
    client = staff("operator")
    for action, status in (
        ("pause_campaigns", "paused"),
        ("resume_campaigns", "active"),
        ("cancel_campaigns", "cancelled"),
    ):
        resp = client.post(CHANGELIST, {"action": action, "_selected_action": [campaign.pk]}, follow=True)
        assert resp.status_code == 200
        campaign.refresh_from_db()
        assert campaign.status == status
    assert set(Message.objects.filter(pk__in=ids).values_list("status", flat=True)) == {Status.CANCELLED}
    log = list(
        LogEntry.objects.filter(object_id=str(campaign.pk))
        .order_by("id")
        .values_list("change_message", flat=True)
    )
    assert log == ["paused (admin:operator)", "resumed (admin:operator)", "cancelled (admin:operator)"]
    # Refused ones are said so, and change nothing.
    resp = client.post(
        CHANGELIST, {"action": "pause_campaigns", "_selected_action": [campaign.pk]}, follow=True
    )
    assert "could not be paused" in resp.content.decode()
    assert Campaign.objects.get(pk=campaign.pk).status == "cancelled"


def test_a_viewer_sees_campaigns_but_cannot_act(tenant):
    campaign, _ = campaign_with_messages(tenant, 2)
    viewer = staff("viewer")
    page = viewer.get(CHANGELIST).content.decode()
    assert campaign.public_id in page and "pause_campaigns" not in page
    viewer.post(CHANGELIST, {"action": "pause_campaigns", "_selected_action": [campaign.pk]})
    assert Campaign.objects.get(pk=campaign.pk).status == "active"
    assert not LogEntry.objects.exists()
