"""Quotas at acceptance: daily_message_quota (segments, by the due day's window in the tenant's timezone)
and max_pending_scheduled (scheduled + queued). A refused request is a 429 naming the quota, stores
nothing and does not burn its Idempotency-Key; cancellation and sending give the place back."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.lifecycle import transitions
from scheduling.limits.models import QuotaWindow
from scheduling.models import Message, MessageEvent, Status
from smsgw.values.timeutil import utc_text
from tests.factories import recipient, tenant_with_key

pytestmark = pytest.mark.django_db

TZ = "America/New_York"
TWO_SEGMENTS = "x" * 161  # GSM-7: 161 characters need two segments


def client_for(**tenant_fields):
    tenant, key = tenant_with_key("quota", default_timezone=TZ, **tenant_fields)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    api.tenant = tenant
    return api


def post(api, i=0, key=None, **fields):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    body = {"to": recipient(i), "body": "hi", "validity_seconds": 7 * 86400, **fields}
    return api.post("/v1/messages", body, format="json", **headers)


def local_midnight_after(day_offset: int = 1) -> datetime:
    zone = ZoneInfo(TZ)
    today = timezone.now().astimezone(zone).date()
    return datetime.combine(today + timedelta(days=day_offset), time(0), tzinfo=zone).astimezone(UTC)


def tomorrow_noon_local() -> str:
    zone = ZoneInfo(TZ)
    day = timezone.now().astimezone(zone).date() + timedelta(days=1)
    return datetime.combine(day, time(12), tzinfo=zone).isoformat()


QUOTAS = {
    # quota -> (tenant fields, expected resets_at for a message due now, Retry-After expected)
    "daily_message_quota": ({"daily_message_quota": 3}, local_midnight_after, True),
    "max_pending_scheduled": ({"max_pending_scheduled": 3}, lambda: None, False),
}


@pytest.mark.parametrize("quota", list(QUOTAS))
def test_over_quota_is_a_429_naming_the_quota_and_stores_nothing(quota):
    fields, resets, retry_after = QUOTAS[quota]
    api = client_for(**fields)
    assert [post(api, i).status_code for i in range(3)] == [201, 201, 201]
    before = (Message.objects.count(), MessageEvent.objects.count())

    asked_at = timezone.now()  # Retry-After counts from the request, not from this check (a busy machine)
    resp = post(api, 9, key="over-the-limit")

    assert resp.status_code == 429
    error = resp.json()["error"]
    assert error["code"] == "quota_exceeded" and error["quota"] == quota
    assert (error["limit"], error["used"], error["requested"]) == (3, 3, 1)
    expected = resets()
    assert error["resets_at"] == (utc_text(expected) if expected else None)
    assert quota in error["message"]
    if retry_after:
        wait = int(resp["Retry-After"])
        assert 0 < wait <= (expected - asked_at).total_seconds() + 1
    else:
        assert "Retry-After" not in resp
    assert (Message.objects.count(), MessageEvent.objects.count()) == before
    assert not Message.objects.filter(idempotency_key="over-the-limit").exists()


@pytest.mark.parametrize("quota", list(QUOTAS))
def test_a_refused_request_does_not_burn_its_idempotency_key(quota):
    fields, _, _ = QUOTAS[quota]
    api = client_for(**fields)
    for i in range(3):
        post(api, i)
    assert post(api, 9, key="k-1").status_code == 429
    type(api.tenant).objects.filter(pk=api.tenant.pk).update(**{quota: 4})

    again = post(api, 9, key="k-1")

    assert again.status_code == 201 and "Idempotent-Replayed" not in again
    assert post(api, 9, key="k-1").status_code == 200  # now it is the original's replay


@pytest.mark.parametrize("quota", list(QUOTAS))
def test_cancelling_gives_the_place_back(quota):
    fields, _, _ = QUOTAS[quota]
    api = client_for(**fields)
    ids = [post(api, i).json()["id"] for i in range(3)]
    assert post(api, 8).status_code == 429

    assert api.post(f"/v1/messages/{ids[0]}/cancel").status_code == 200

    assert post(api, 8).status_code == 201
    assert post(api, 9).status_code == 429


def test_the_daily_quota_counts_segments():
    api = client_for(daily_message_quota=3)
    assert post(api, 0, body=TWO_SEGMENTS).status_code == 201

    resp = post(api, 1, body=TWO_SEGMENTS)

    assert resp.status_code == 429
    assert (resp.json()["error"]["used"], resp.json()["error"]["requested"]) == (2, 2)
    assert post(api, 2, body="one segment").status_code == 201


def test_a_message_uses_the_quota_of_the_local_day_it_is_due():
    api = client_for(daily_message_quota=1)
    assert post(api, 0).status_code == 201
    assert post(api, 1).status_code == 429  # today's window is full

    later = post(api, 2, send_at=tomorrow_noon_local())  # tomorrow's window is not
    assert later.status_code == 201
    refused = post(api, 3, send_at=tomorrow_noon_local())

    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["resets_at"] == utc_text(local_midnight_after(2))
    assert "Retry-After" not in refused  # waiting does not help a later day's window
    zone = ZoneInfo(TZ)
    today = timezone.now().astimezone(zone).date()
    assert dict(QuotaWindow.objects.values_list("day", "booked")) == {today: 1, today + timedelta(days=1): 1}


def later_today(share: float) -> str:
    """A moment still in today's local window: ``share`` of the time left until local midnight (a fixed
    "in an hour" is tomorrow's window after 23:00 in New York)."""
    now = timezone.now()
    return (now + (local_midnight_after(1) - now) * share).isoformat()


def test_rescheduling_into_a_full_day_is_refused_and_changes_nothing():
    api = client_for(daily_message_quota=1)
    tomorrow = post(api, 0, send_at=tomorrow_noon_local()).json()
    moving = post(api, 1, send_at=later_today(0.4)).json()

    resp = api.patch(f"/v1/messages/{moving['id']}", {"send_at": tomorrow_noon_local()}, format="json")

    assert resp.status_code == 429 and resp.json()["error"]["quota"] == "daily_message_quota"
    m = Message.objects.get(public_id=moving["id"])
    assert (m.version, m.due_at.isoformat().replace("+00:00", "Z")) == (1, moving["due_at"])
    assert not m.events.filter(kind="rescheduled").exists()
    # And the other way round the booking moves with it: today's place is free again.
    back = api.patch(
        f"/v1/messages/{tomorrow['id']}",
        {"send_at": later_today(0.7)},
        format="json",
    )
    assert back.status_code == 429  # today is still full (the moving message stayed there)
    assert api.post(f"/v1/messages/{moving['id']}/cancel").status_code == 200
    assert (
        api.patch(
            f"/v1/messages/{tomorrow['id']}",
            {"send_at": later_today(0.7)},
            format="json",
        ).status_code
        == 200
    )
    assert post(api, 5, send_at=tomorrow_noon_local()).status_code == 201


@pytest.mark.parametrize("leaves", ["sending", "expired"])
def test_a_message_stops_being_pending_once_handed_over_or_ended(leaves):
    api = client_for(max_pending_scheduled=1)
    first = Message.objects.get(public_id=post(api, 0).json()["id"])
    assert post(api, 1).status_code == 429
    transitions.transition(first.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    assert post(api, 1).status_code == 429  # queued still counts: not handed to the provider yet
    transitions.transition(first.pk, from_statuses=[Status.QUEUED], to_status=leaves, kind=leaves)

    assert post(api, 1).status_code == 201


def test_without_quotas_nothing_is_booked():
    api = client_for()
    assert [post(api, i).status_code for i in range(5)] == [201] * 5
    assert not QuotaWindow.objects.exists()


def test_capacity_shows_quotas_and_usage():
    api = client_for(daily_message_quota=10, max_pending_scheduled=5, quota_exceeded_policy="fail")
    post(api, 0, body=TWO_SEGMENTS)
    post(api, 1)

    quotas = api.get("/v1/capacity").json()["quotas"]

    assert quotas["daily_message_quota"]["limit"] == 10
    assert quotas["daily_message_quota"]["booked"] == 3
    assert quotas["daily_message_quota"]["timezone"] == TZ
    assert quotas["daily_message_quota"]["resets_at"] == utc_text(local_midnight_after())
    assert quotas["max_pending_scheduled"] == {"limit": 5, "used": 2}
    assert quotas["quota_exceeded_policy"] == "fail"
