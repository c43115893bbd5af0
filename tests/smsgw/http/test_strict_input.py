"""JSON values are taken at their documented type: a number where a string is documented, a string or a
number where a boolean or an integer is, is a 400 naming the field, and nothing is stored or changed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Message, Schedule
from tests.factories import RECIPIENT

pytestmark = pytest.mark.django_db

MESSAGE = {"to": RECIPIENT, "body": "hello"}
SCHEDULE = {
    "to": RECIPIENT,
    "body": "hi",
    "rrule": "FREQ=DAILY",
    "start": "2030-01-01T09:00:00",
    "timezone": "UTC",
}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("body", 0),
        ("body", 12.5),
        ("body", True),
        ("to", 14155550123),
        ("timezone", 1),
        ("send_at", 1767225600),
        ("priority", 1),
        ("validity_seconds", "3600"),
        ("validity_seconds", 3600.0),
        ("validity_seconds", True),
        ("recipient_timezone", ["UTC"]),
    ],
)
def test_message_field_of_another_json_type_is_a_400_naming_it(api, field, value):
    resp = api.post("/v1/messages", {**MESSAGE, field: value}, format="json")
    assert resp.status_code == 400, resp.content
    assert list(resp.json()["error"]["fields"]) == [field]
    assert not Message.objects.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [("body", 0), ("rrule", 1), ("start", 20300101), ("exdate", [20301225]), ("exdate", "2030-12-25")],
)
def test_schedule_field_of_another_json_type_is_a_400_naming_it(api, field, value):
    resp = api.post("/v1/schedules", {**SCHEDULE, field: value}, format="json")
    assert resp.status_code == 400, resp.content
    assert list(resp.json()["error"]["fields"]) == [field]
    assert not Schedule.objects.exists()


def test_message_patch_of_another_json_type_changes_nothing(api):
    mid = api.post(
        "/v1/messages",
        {**MESSAGE, "send_at": (timezone.now() + timedelta(days=1)).isoformat()},
        format="json",
    ).json()["id"]
    resp = api.patch(f"/v1/messages/{mid}", {"body": 42}, format="json")
    assert resp.status_code == 400 and list(resp.json()["error"]["fields"]) == ["body"]
    assert Message.objects.get(public_id=mid).body == "hello"


@pytest.mark.parametrize("value", [0, 1, "true", "yes", "off"])
def test_quiet_hours_flag_must_be_a_boolean(api, value):
    resp = api.put(
        "/v1/quiet-hours", {"start": "21:00", "end": "08:00", "exempt_transactional": value}, format="json"
    )
    assert resp.status_code == 400 and list(resp.json()["error"]["fields"]) == ["exempt_transactional"]
    api.tenant.refresh_from_db()
    assert api.tenant.quiet_hours_start is None


@pytest.mark.parametrize("value", ["2", True])
def test_sender_rate_must_be_a_number(api, value):
    resp = api.put("/v1/capacity/senders/+14155550100", {"segments_per_second": value}, format="json")
    assert resp.status_code == 400 and list(resp.json()["error"]["fields"]) == ["segments_per_second"]


@pytest.mark.parametrize("value", [1, "yes", "false"])
def test_webhook_rotate_secret_must_be_a_boolean(api, value):
    resp = api.put("/v1/webhook", {"url": "", "rotate_secret": value}, format="json")
    assert resp.status_code == 400 and list(resp.json()["error"]["fields"]) == ["rotate_secret"]


def test_right_types_are_still_accepted(api):
    resp = api.post("/v1/messages", {**MESSAGE, "validity_seconds": 3600, "priority": "bulk"}, format="json")
    assert resp.status_code == 201, resp.content
    resp = api.post("/v1/schedules", {**SCHEDULE, "exdate": ["2030-12-25"]}, format="json")
    assert resp.status_code == 201, resp.content
    resp = api.put(
        "/v1/quiet-hours", {"start": "21:00", "end": "08:00", "exempt_transactional": False}, format="json"
    )
    assert resp.status_code == 200, resp.content
    resp = api.put("/v1/capacity/senders/+14155550100", {"segments_per_second": 2}, format="json")
    assert resp.status_code == 200, resp.content
