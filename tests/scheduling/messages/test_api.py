"""Tenant API: happy paths and every bad-input case of the lifecycle issue (4xx naming the field,
never a 500, nothing accepted changed)."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.lifecycle import transitions
from scheduling.models import Message, MessageEvent, Status
from smsgw.models import ApiKey
from tests.factories import RECIPIENT, queued_by_an_unreachable_host, tenant_with_key

pytestmark = pytest.mark.django_db


def post(api, data, **headers):
    return api.post("/v1/messages", data, format="json", **headers)


def field_of(resp):
    return resp.json()["error"]["fields"]


def test_send_now_is_stored_scheduled_and_due_now(api):
    before = timezone.now()
    resp = post(api, {"to": RECIPIENT, "body": "Your code is 1234"})
    assert resp.status_code == 201, resp.content
    data = resp.json()
    assert data["id"].startswith("msg_") and data["status"] == "scheduled"
    assert data["encoding"] == "GSM-7" and data["segments"] == 1
    assert data["from"] == "+14155550100"
    msg = Message.objects.get(public_id=data["id"])
    assert before <= msg.due_at <= timezone.now() and msg.run_after == msg.due_at
    assert msg.expires_at - msg.due_at == timedelta(hours=48)
    assert list(msg.events.values_list("kind", flat=True)) == ["created"]


def test_local_time_in_new_york_resolves_to_utc_and_keeps_the_intent(api):
    local = datetime(timezone.now().year + 1, 7, 15, 9, 30)
    if local - datetime.now() > timedelta(days=399):
        local = local.replace(year=local.year - 1)
    resp = post(
        api, {"to": RECIPIENT, "body": "hi", "send_at": local.isoformat(), "timezone": "America/New_York"}
    )
    assert resp.status_code == 201, resp.content
    data = resp.json()
    assert data["requested"] == {
        "send_at": local.isoformat(),
        "local_time": local.isoformat(),
        "timezone": "America/New_York",
        "dst_policy": "earlier",
        "dst_adjustment": "none",
    }
    # July: EDT, UTC-4
    assert data["due_at"].startswith(local.replace(hour=13).isoformat())


def test_dst_gap_is_moved_forward_and_recorded(api):
    year = timezone.now().year + 1
    resp = post(
        api,
        {
            "to": RECIPIENT,
            "body": "hi",
            "send_at": f"{year}-03-{_second_sunday_march(year):02d}T02:30:00",
            "timezone": "America/New_York",
        },
    )
    assert resp.status_code == 201, resp.content
    data = resp.json()
    assert data["requested"]["dst_adjustment"] == "gap_shifted_forward"
    assert data["due_at"].endswith("T07:30:00Z") or "T07:30:00" in data["due_at"]
    created = MessageEvent.objects.get(message__public_id=data["id"], kind="created")
    assert "dst_note" in created.details


def _second_sunday_march(year):
    d = datetime(year, 3, 1)
    first_sunday = 1 + (6 - d.weekday()) % 7
    return first_sunday + 7


def test_absolute_time_with_offset(api):
    at = (timezone.now() + timedelta(hours=2)).replace(microsecond=0)
    resp = post(
        api,
        {"to": RECIPIENT, "body": "hi", "send_at": at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S+00:00")},
    )
    assert resp.status_code == 201, resp.content
    assert Message.objects.get(public_id=resp.json()["id"]).due_at == at


def test_get_list_and_events(api):
    ids = [post(api, {"to": RECIPIENT, "body": f"m{i}"}).json()["id"] for i in range(3)]
    assert api.get(f"/v1/messages/{ids[0]}").json()["id"] == ids[0]
    page = api.get("/v1/messages", {"page_size": 2}).json()
    assert [m["id"] for m in page["results"]] == [ids[2], ids[1]]
    nxt = api.get(page["next"]).json()
    assert [m["id"] for m in nxt["results"]] == [ids[0]]
    assert api.get("/v1/messages", {"status": "cancelled"}).json()["results"] == []
    timeline = api.get(f"/v1/messages/{ids[0]}/events").json()
    assert [e["kind"] for e in timeline["events"]] == ["created"]


def test_cancel_scheduled_then_repeat_is_harmless(api):
    mid = post(
        api, {"to": RECIPIENT, "body": "x", "send_at": (timezone.now() + timedelta(hours=1)).isoformat()}
    ).json()["id"]
    resp = api.post(f"/v1/messages/{mid}/cancel")
    assert resp.status_code == 200 and resp.json()["status"] == "cancelled"
    assert resp.json()["reason_code"] == "cancelled_by_request"
    again = api.post(f"/v1/messages/{mid}/cancel")
    assert again.status_code == 200 and again.json()["status"] == "cancelled"
    kinds = list(
        MessageEvent.objects.filter(message__public_id=mid).order_by("id").values_list("kind", flat=True)
    )
    assert kinds == ["created", "cancelled", "cancel_repeated"]


@pytest.mark.parametrize("stage", [Status.SENDING, Status.SENT, Status.FAILED])
def test_cancel_after_sending_began_is_409_with_the_real_stage(api, stage):
    mid = post(api, {"to": RECIPIENT, "body": "x"}).json()["id"]
    msg = Message.objects.get(public_id=mid)
    Message.objects.filter(pk=msg.pk).update(status=stage)  # put the row where a worker would have
    resp = api.post(f"/v1/messages/{mid}/cancel")
    assert resp.status_code == 409
    assert resp.json()["error"]["status"] == stage
    msg.refresh_from_db()
    assert msg.status == stage
    assert msg.events.filter(kind="cancel_rejected").count() == 1


def test_patch_reschedules_while_scheduled_and_records_a_version(api):
    mid = post(
        api, {"to": RECIPIENT, "body": "x", "send_at": (timezone.now() + timedelta(hours=1)).isoformat()}
    ).json()["id"]
    new_at = (timezone.now() + timedelta(hours=5)).replace(microsecond=0)
    resp = api.patch(f"/v1/messages/{mid}", {"send_at": new_at.isoformat(), "body": "changed"}, format="json")
    assert resp.status_code == 200, resp.content
    msg = Message.objects.get(public_id=mid)
    assert msg.due_at == new_at and msg.run_after == new_at and msg.body == "changed" and msg.version == 2
    ev = msg.events.get(kind="rescheduled")
    assert ev.details["new_due_at"] == new_at.isoformat() and ev.details["changed"] == ["body", "send_at"]


def test_patch_after_sending_is_409_and_changes_nothing(api):
    mid = post(api, {"to": RECIPIENT, "body": "x"}).json()["id"]
    msg = Message.objects.get(public_id=mid)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    transitions.transition(
        msg.pk, from_statuses=[Status.QUEUED], to_status=Status.SENDING, kind="attempt_started"
    )
    resp = api.patch(f"/v1/messages/{mid}", {"body": "too late"}, format="json")
    assert resp.status_code == 409 and resp.json()["error"]["status"] == "sending"
    msg.refresh_from_db()
    assert msg.body == "x" and msg.status == Status.SENDING


def test_idempotency_key_replays_and_rejects_a_different_body(api):
    first = post(api, {"to": RECIPIENT, "body": "once"}, HTTP_IDEMPOTENCY_KEY="k-1")
    again = post(api, {"to": RECIPIENT, "body": "once"}, HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"] and again["Idempotent-Replayed"] == "true"
    other = post(api, {"to": RECIPIENT, "body": "different"}, HTTP_IDEMPOTENCY_KEY="k-1")
    assert other.status_code == 422
    assert Message.objects.count() == 1 and Message.objects.get().body == "once"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"body": "x"}, "to"),
        ({"to": RECIPIENT}, "body"),
        ({"to": "4155550123", "body": "x"}, "to"),
        ({"to": "+1415555012", "body": "x"}, "to"),
        ({"to": "+1abc", "body": "x"}, "to"),
        ({"to": RECIPIENT, "body": ""}, "body"),
        ({"to": RECIPIENT, "body": "x", "timezone": "Mars/Olympus"}, "timezone"),
        (
            {"to": RECIPIENT, "body": "x", "send_at": "2030-01-01T09:00:00", "timezone": "Nowhere/Land"},
            "timezone",
        ),
        ({"to": RECIPIENT, "body": "x", "send_at": "tomorrow at nine"}, "send_at"),
        ({"to": RECIPIENT, "body": "x", "send_at": "2020-01-01T09:00:00Z"}, "send_at"),
        ({"to": RECIPIENT, "body": "x" * 1531}, "body"),
        ({"to": RECIPIENT, "body": "ж" * 700}, "body"),
        ({"to": RECIPIENT, "body": "x", "priority": "urgent"}, "priority"),
        ({"to": RECIPIENT, "body": "x", "dst_policy": "middle"}, "dst_policy"),
        ({"to": RECIPIENT, "body": "x", "validity_seconds": 5}, "validity_seconds"),
        ({"to": RECIPIENT, "body": "x", "sendAt": "2030-01-01T09:00:00Z"}, "sendAt"),
        ({"to": RECIPIENT, "body": "x", "from": "not a sender!"}, "from"),
        ({"to": RECIPIENT, "body": "x", "metadata": "nope"}, "metadata"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_stores_nothing(api, payload, field):
    resp = post(api, payload)
    assert resp.status_code == 400, resp.content
    assert field in field_of(resp), resp.json()
    assert Message.objects.count() == 0


def test_malformed_json_is_400(api):
    resp = api.post("/v1/messages", data="{not json", content_type="application/json")
    assert resp.status_code == 400 and "body" in field_of(resp)
    resp = api.post("/v1/messages", data="[1, 2]", content_type="application/json")
    assert resp.status_code == 400


def test_rejected_patch_changes_nothing(api):
    mid = post(
        api, {"to": RECIPIENT, "body": "x", "send_at": (timezone.now() + timedelta(hours=1)).isoformat()}
    ).json()["id"]
    before = Message.objects.get(public_id=mid)
    resp = api.patch(f"/v1/messages/{mid}", {"body": "ok", "timezone": "Bad/Zone"}, format="json")
    assert resp.status_code == 400 and "timezone" in field_of(resp)
    after = Message.objects.get(public_id=mid)
    assert (after.body, after.version, after.due_at) == (before.body, before.version, before.due_at)


def test_other_tenants_message_is_404_for_get_cancel_patch_events(api):
    _, other_key = tenant_with_key("other")
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {other_key}")
    mid = post(other, {"to": RECIPIENT, "body": "theirs"}).json()["id"]
    assert api.get(f"/v1/messages/{mid}").status_code == 404
    assert api.post(f"/v1/messages/{mid}/cancel").status_code == 404
    assert api.patch(f"/v1/messages/{mid}", {"body": "mine"}, format="json").status_code == 404
    assert api.get(f"/v1/messages/{mid}/events").status_code == 404
    assert api.get("/v1/messages").json()["results"] == []
    assert Message.objects.get(public_id=mid).status == Status.SCHEDULED


def test_missing_malformed_and_revoked_keys_are_401():
    client = APIClient()
    assert client.post("/v1/messages", {"to": RECIPIENT, "body": "x"}, format="json").status_code == 401
    client.credentials(HTTP_AUTHORIZATION="Bearer nope")
    assert client.get("/v1/messages").status_code == 401
    tenant, raw = tenant_with_key("revoked")
    ApiKey.objects.filter(tenant=tenant).update(revoked_at=timezone.now())
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.post("/v1/messages", {"to": RECIPIENT, "body": "x"}, format="json").status_code == 401
    assert Message.objects.count() == 0


def test_key_is_stored_hashed():
    _, raw = tenant_with_key("hashed")
    key = ApiKey.objects.get(tenant__slug="hashed")
    secret = raw.split("_")[2]
    assert secret not in key.secret_hash and raw.split("_")[1] == key.prefix


def test_openapi_schema_is_served():
    resp = APIClient().get("/v1/openapi.json")
    assert resp.status_code == 200
    assert "/v1/messages" in resp.json()["paths"]


def test_quiet_hours_override_moves_a_send_to_the_window_end_and_shows_it(api):
    now = timezone.now()
    # A window covering the whole day except the next minute's edge: "now" is inside it.
    start = (now - timedelta(hours=1)).strftime("%H:%M")
    end = (now + timedelta(hours=2)).strftime("%H:%M")
    resp = post(
        api,
        {
            "to": RECIPIENT,
            "body": "x",
            "priority": "bulk",
            "quiet_hours": {"start": start, "end": end},
            "recipient_timezone": "UTC",
        },
    )
    assert resp.status_code == 201, resp.content
    data = resp.json()
    assert data["quiet_hours"]["timezone"] == "UTC" and data["quiet_hours"]["deferred_from"]
    due = datetime.fromisoformat(data["due_at"].replace("Z", "+00:00"))
    assert due.strftime("%H:%M") == end and due > now
    assert data["schedule"] is None


def test_bad_quiet_hours_override_is_a_400_naming_the_field(api):
    resp = post(api, {"to": RECIPIENT, "body": "x", "quiet_hours": {"start": "21:00", "end": "21:00"}})
    assert resp.status_code == 400 and "quiet_hours" in field_of(resp)
    resp = post(api, {"to": RECIPIENT, "body": "x", "recipient_timezone": "Nowhere/Land"})
    assert resp.status_code == 400 and "recipient_timezone" in field_of(resp)
    assert Message.objects.count() == 0


def test_the_timeline_shows_operators_and_the_system_by_kind_not_by_name(api):
    """The database keeps the operator's username and the host's name (the admin shows them); the
    tenant's API shows "operator", "system" and its own key, and no host name anywhere."""
    resp = post(api, {"to": RECIPIENT, "body": "hi"})
    msg = Message.objects.get(public_id=resp.json()["id"])
    queued_by_an_unreachable_host(msg.pk, host="worker-7.dc2.internal", handed_over=True)
    transitions.transition(
        msg.pk,
        from_statuses=[Status.QUEUED],
        to_status=Status.CANCELLED,
        kind="cancelled",
        actor="admin:alice",
    )
    stored = list(msg.events.order_by("id").values_list("actor", flat=True))
    assert stored == [f"apikey:{ApiKey.objects.get().prefix}", "system", "admin:alice"]

    events = api.get(f"/v1/messages/{msg.public_id}/events").json()["events"]
    assert [e["actor"] for e in events] == [f"apikey:{ApiKey.objects.get().prefix}", "system", "operator"]
    assert events[1]["details"] == {"handed_over": True}
    shown = api.get(f"/v1/messages/{msg.public_id}").text
    assert "worker-7" not in shown and "alice" not in shown
    assert "alice" not in api.get(f"/v1/messages/{msg.public_id}/events").text
