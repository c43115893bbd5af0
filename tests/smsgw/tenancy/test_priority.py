"""A tenant's priority ceiling (smsgw.tenancy.priority): a tenant capped at `bulk` asking for
`transactional` is refused with a 400 naming `priority` on every path that takes one (a message, a batch
item, an edit, a schedule, a campaign) and nothing is stored; asking for nothing gets its ceiling
(the Twilio-compatible API, which has no priority, included); definitions stored before the cap are
made at the ceiling; an uncapped tenant keeps today's behaviour."""

from __future__ import annotations

import base64
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from config.admin import TenantForm
from scheduling.campaigns.make import campaign_make
from scheduling.models import Campaign, Message, Schedule
from tests.factories import RECIPIENT, message, recipient, tenant_with_key

pytestmark = pytest.mark.django_db
LATER = (timezone.now() + timedelta(days=2)).replace(microsecond=0, tzinfo=None).isoformat() + "Z"


@pytest.fixture
def capped():
    tenant, key = tenant_with_key("capped", max_priority="bulk")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return tenant, key, api


def _refused_on_priority(resp) -> None:
    assert resp.status_code == 400, resp.content
    assert "priority" in resp.json()["error"]["fields"], resp.json()


def _soon() -> str:
    at = timezone.now() + timedelta(hours=1)
    return at.replace(second=0, microsecond=0, tzinfo=None).isoformat()


def test_a_capped_tenant_asking_for_transactional_is_refused_everywhere_and_nothing_is_stored(capped):
    _, _, api = capped
    one = {"to": RECIPIENT, "body": "hi", "priority": "transactional"}
    _refused_on_priority(api.post("/v1/messages", one, format="json"))
    batch = api.post("/v1/messages/batch", {"messages": [one]}, format="json").json()
    assert batch["refused"] == 1 and "priority" in batch["results"][0]["error"]["fields"]
    schedule = {"to": RECIPIENT, "body": "hi", "rrule": "FREQ=DAILY", "start": _soon(), "timezone": "UTC"}
    _refused_on_priority(api.post("/v1/schedules", {**schedule, "priority": "transactional"}, format="json"))
    campaign = {"body": "hi", "send_at": LATER, "recipients": [{"phone": recipient(1)}]}
    _refused_on_priority(api.post("/v1/campaigns", {**campaign, "priority": "transactional"}, format="json"))
    assert not Message.objects.exists() and not Schedule.objects.exists() and not Campaign.objects.exists()


def test_an_edit_to_transactional_is_refused_and_changes_nothing(capped):
    tenant, _, api = capped
    m = message(tenant, due_in=3600, priority="bulk")
    _refused_on_priority(
        api.patch(f"/v1/messages/{m.public_id}", {"priority": "transactional"}, format="json")
    )
    m.refresh_from_db()
    assert m.priority == "bulk" and m.version == 1


def test_asking_for_nothing_gets_the_ceiling_on_every_path(capped):
    tenant, key, api = capped
    resp = api.post("/v1/messages", {"to": RECIPIENT, "body": "hi", "send_at": LATER}, format="json")
    assert resp.status_code == 201 and resp.json()["priority"] == "bulk"
    assert (
        api.post(
            "/v1/messages", {"to": RECIPIENT, "body": "b", "priority": "bulk"}, format="json"
        ).status_code
        == 201
    )
    schedule = {"to": RECIPIENT, "body": "hi", "rrule": "FREQ=DAILY", "start": _soon(), "timezone": "UTC"}
    made = api.post("/v1/schedules", schedule, format="json")
    assert made.status_code == 201 and made.json()["priority"] == "bulk"
    facade = Client().post(
        f"/2010-04-01/Accounts/{tenant.facade_account_sid}/Messages.json",
        {"To": RECIPIENT, "Body": "hi"},
        HTTP_AUTHORIZATION=_basic(tenant.facade_account_sid, key),
    )
    assert facade.status_code == 201, facade.content
    assert set(Message.objects.values_list("priority", flat=True)) == {"bulk"}


def test_definitions_stored_before_the_cap_are_made_at_the_ceiling(capped):
    tenant, _, api = capped
    tenant.max_priority = "transactional"
    tenant.save(update_fields=["max_priority"])
    campaign = {
        "body": "hi",
        "send_at": LATER,
        "priority": "transactional",
        "recipients": [{"phone": recipient(1)}],
    }
    resp = api.post("/v1/campaigns", campaign, format="json")
    assert resp.status_code == 202, resp.content
    tenant.max_priority = "bulk"  # the operator caps it before the creation job runs
    tenant.save(update_fields=["max_priority"])
    campaign_make(Campaign.objects.get().pk)
    assert list(Message.objects.values_list("priority", flat=True)) == ["bulk"]


def test_an_uncapped_tenant_keeps_transactional_by_default():
    _, key = tenant_with_key("free")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    resp = api.post("/v1/messages", {"to": RECIPIENT, "body": "hi"}, format="json")
    assert resp.status_code == 201 and resp.json()["priority"] == "transactional"


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_an_admin_caps_a_tenant_in_the_tenant_form():
    tenant, _ = tenant_with_key("formed")
    base = {"name": "F", "slug": "formed", "default_from": "+14155550100", "default_timezone": "UTC"}
    base |= {"daily_message_quota": 0, "max_pending_scheduled": 0, "send_rate_per_second": 0}
    base |= {"quota_exceeded_policy": "defer", "allowed_countries": "[]", "deny_prefixes": "[]"}
    base |= {"deny_exempt_prefixes": "[]"}
    form = TenantForm(data={**base, "max_priority": "bulk"}, instance=tenant)
    assert form.is_valid(), form.errors
    form.save()
    tenant.refresh_from_db()
    assert tenant.max_priority == "bulk"
    assert not TenantForm(data={**base, "max_priority": "urgent"}, instance=tenant).is_valid()
