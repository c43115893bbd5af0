"""The daily quota at execution (the sweep's quota gate) and for schedules: a message that becomes due
while the tenant's window is used up waits for the next window (defer) or fails (fail), with one
timeline entry; a cancelled one gives its segments back; the gate costs per pass, not per message."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.dispatch import sweep
from scheduling.limits.models import QuotaWindow
from scheduling.models import Message, Status
from smsgw.models import Tenant
from tests.factories import recipient, tenant_with_key

pytestmark = pytest.mark.django_db

TZ = "Europe/Berlin"


def client_for(**tenant_fields):
    tenant, key = tenant_with_key("quota", default_timezone=TZ, **tenant_fields)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    api.tenant = tenant
    return api


def post(api, i=0, **fields):
    body = {"to": recipient(i), "body": "hi", "validity_seconds": 7 * 86400, **fields}
    resp = api.post("/v1/messages", body, format="json")
    assert resp.status_code == 201, resp.json()
    return resp.json()["id"]


def next_window(now=None) -> datetime:
    zone = ZoneInfo(TZ)
    day = (now or timezone.now()).astimezone(zone).date() + timedelta(days=1)
    return datetime.combine(day, time(0), tzinfo=zone).astimezone(UTC)


def lower_quota(api, quota: int, **fields) -> None:
    """The operator lowers the quota after the messages were accepted (or they came from elsewhere)."""
    Tenant.objects.filter(pk=api.tenant.pk).update(daily_message_quota=quota, **fields)


def test_over_quota_at_execution_is_deferred_to_the_next_window_with_one_timeline_entry():
    api = client_for(daily_message_quota=3)
    ids = [post(api, i) for i in range(3)]
    lower_quota(api, 2)

    sweep.sweep_once()
    sweep.sweep_once()  # still over: no second entry

    by_status = dict(Message.objects.values_list("public_id", "status"))
    assert sorted(by_status.values()) == ["queued", "queued", "scheduled"]
    waiting = Message.objects.get(status=Status.SCHEDULED)
    assert waiting.public_id == ids[2]  # oldest first
    assert waiting.reason_code == "quota_exceeded" and waiting.run_after == next_window()
    entries = list(waiting.events.filter(kind="quota_deferred"))
    assert len(entries) == 1
    assert entries[0].details["expected_send_at"] == next_window().isoformat()
    assert entries[0].details["quota"] == "daily_message_quota" and entries[0].details["limit"] == 2
    shown = api.get(f"/v1/messages/{waiting.public_id}").json()
    assert shown["status"] == "scheduled" and shown["reason_code"] == "quota_exceeded"
    assert shown["expected_send_at"] == next_window().isoformat().replace("+00:00", "Z")
    # Its segments wait in the next window's booking, and it goes out once that window has begun.
    zone = ZoneInfo(TZ)
    assert QuotaWindow.objects.get(day=next_window().astimezone(zone).date()).booked == 1
    sweep.sweep_once(now=next_window() + timedelta(seconds=1))
    waiting.refresh_from_db()
    assert waiting.status == Status.QUEUED and waiting.reason_code == ""


def test_over_quota_at_execution_fails_when_the_tenant_policy_says_so():
    api = client_for(daily_message_quota=3)
    ids = [post(api, i) for i in range(3)]
    lower_quota(api, 2, quota_exceeded_policy="fail")

    sweep.sweep_once()

    failed = Message.objects.get(public_id=ids[2])
    assert failed.status == Status.FAILED and failed.reason_code == "quota_exceeded" and failed.failed_at
    assert [e.kind for e in failed.events.order_by("id")] == ["created", "failed"]
    assert failed.events.get(kind="failed").details["reason"] == "quota_exceeded"
    assert Message.objects.filter(status=Status.QUEUED).count() == 2


def test_the_window_counts_segments_released_not_messages():
    api = client_for(daily_message_quota=4)
    post(api, 0, body="x" * 161)  # two segments
    post(api, 1, body="x" * 161)
    lower_quota(api, 3)

    sweep.sweep_once()

    assert sorted(Message.objects.values_list("status", flat=True)) == ["queued", "scheduled"]
    assert QuotaWindow.objects.get(day=timezone.now().astimezone(ZoneInfo(TZ)).date()).released == 2


def test_a_cancelled_queued_message_gives_its_segments_back_to_the_window():
    api = client_for(daily_message_quota=2)
    first, second = post(api, 0), post(api, 1)
    sweep.sweep_once()
    assert api.post(f"/v1/messages/{first}/cancel").status_code == 200

    third = post(api, 2)  # its booked place was given back ...
    sweep.sweep_once()

    assert Message.objects.get(public_id=third).status == Status.QUEUED  # ... and its released one
    assert Message.objects.get(public_id=second).status == Status.QUEUED
    window = QuotaWindow.objects.get(day=timezone.now().astimezone(ZoneInfo(TZ)).date())
    assert (window.booked, window.released) == (2, 2)


def test_other_tenants_and_retries_are_not_held_back():
    api = client_for(daily_message_quota=1)
    post(api, 0)
    lower_quota(api, 0)  # unlimited again: the gate lets everything through
    other, _ = tenant_with_key("other", daily_message_quota=1)
    sweep.sweep_once()
    assert Message.objects.filter(status=Status.QUEUED).count() == 1
    assert other.pk  # a tenant with a quota but nothing due costs nothing


@pytest.mark.parametrize("n", [3, 30])
def test_the_gate_costs_the_same_queries_whatever_the_batch(n):
    api = client_for(daily_message_quota=n + 10)
    for i in range(n):
        post(api, i)
    lower_quota(api, n // 3 or 1)

    with CaptureQueriesContext(connection) as queries:
        sweep.sweep_once()

    statements = [q["sql"] for q in queries.captured_queries if "limits_quotawindow" in q["sql"]]
    assert len(statements) <= 4, statements  # ensure, locked read, released, next window's booking
    tenant_reads = [q["sql"] for q in queries.captured_queries if 'FROM "smsgw_tenant"' in q["sql"]]
    # One each per pass, whatever the batch: disabled tenants (release), velocity limits
    # (delivery.guards.velocity), and the quota gate's own.
    assert len(tenant_reads) <= 4, tenant_reads


def test_schedule_occurrences_count_toward_the_daily_quota_and_wait_at_execution():
    api = client_for(daily_message_quota=2)
    zone = ZoneInfo(TZ)
    now = timezone.now()
    # Four occurrences five minutes apart, starting on the hour: all in one local window, inside the horizon.
    start = (now + timedelta(hours=2)).astimezone(zone).replace(minute=0, second=0, microsecond=0)
    day = start.date()
    resp = api.post(
        "/v1/schedules",
        {
            "to": recipient(0),
            "body": "Take your medicine",
            "rrule": "FREQ=MINUTELY;INTERVAL=5;COUNT=4",
            "start": start.replace(tzinfo=None).isoformat(),
            "timezone": TZ,
        },
        format="json",
    )
    assert resp.status_code == 201, resp.json()
    made = Message.objects.filter(schedule__public_id=resp.json()["id"]).order_by("due_at")
    assert made.count() == 4
    # Made even beyond the quota, booked in their window: a new request for that day is refused.
    assert QuotaWindow.objects.get(day=day).booked == 4
    refused = api.post(
        "/v1/messages",
        {"to": recipient(1), "body": "hi", "send_at": start.isoformat()},
        format="json",
    )
    assert refused.status_code == 429 and refused.json()["error"]["quota"] == "daily_message_quota"

    sweep.sweep_once(now=made.last().due_at + timedelta(seconds=1))

    statuses = list(made.values_list("status", "reason_code"))
    assert statuses[:2] == [("queued", "")] * 2
    assert statuses[2:] == [("scheduled", "quota_exceeded")] * 2
