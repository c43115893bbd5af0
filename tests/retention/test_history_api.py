"""The tenant APIs keep answering for a message after it moved to history: the REST API's detail,
timeline and list (one cursor order across the live table and history), and the Twilio-compatible fetch
and list through the official SDK."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from retention.history import history_move_batch
from retention.models import MessageHistory
from scheduling.facade.resources import message_sid
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from tests.factories import message, tenant_with_key
from tests.scheduling.facade.sdk_client import sdk_in_process

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]


def _delivered(tenant, to="+14155550123", body="hello"):
    msg = message(tenant, to=to, body=body)
    for status in (Status.QUEUED, Status.SENDING, Status.SENT, Status.DELIVERED):
        transitions.transition(msg.pk, from_statuses=[msg.status], to_status=status, kind=f"to_{status}")
        msg.status = status
    return msg


def _moved(*msgs):
    done = history_move_batch(now=timezone.now() + timedelta(hours=49))
    assert done["messages_moved"] == len(msgs)
    assert not Message.objects.filter(id__in=[m.pk for m in msgs]).exists()


@pytest.fixture
def tenant_key():
    return tenant_with_key("acme")


@pytest.fixture
def api(tenant_key):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {tenant_key[1]}")
    return client


def test_detail_and_timeline_of_a_moved_message(api, tenant_key):
    msg = _delivered(tenant_key[0], body="see you at 9")
    _moved(msg)
    got = api.get(f"/v1/messages/{msg.public_id}")
    assert got.status_code == 200, got.content
    assert (got.json()["id"], got.json()["status"], got.json()["body"]) == (
        msg.public_id,
        "delivered",
        "see you at 9",
    )
    events = api.get(f"/v1/messages/{msg.public_id}/events").json()
    assert [e["kind"] for e in events["events"]] == [
        "created",
        "to_queued",
        "to_sending",
        "to_sent",
        "to_delivered",
    ]


def test_another_tenant_cannot_read_a_moved_message(tenant_key):
    msg = _delivered(tenant_key[0])
    _moved(msg)
    _, other_key = tenant_with_key("other")
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {other_key}")
    assert other.get(f"/v1/messages/{msg.public_id}").status_code == 404
    assert other.get("/v1/messages").json()["results"] == []


def test_the_list_pages_across_live_and_history_in_one_order(api, tenant_key):
    tenant = tenant_key[0]
    old = [_delivered(tenant, to=f"+1415555{i:04d}") for i in range(5)]
    _moved(*old)
    live = [message(tenant, due_in=3600, to=f"+1415556{i:04d}") for i in range(4)]
    # Interleave: a final message that has not moved yet, between moved ones by id.
    everything = sorted([*old, *live], key=lambda m: m.pk, reverse=True)
    seen, url = [], "/v1/messages?page_size=3"
    pages = 0
    while url:
        page = api.get(url).json()
        seen += [m["id"] for m in page["results"]]
        url = page["next"]
        pages += 1
    assert seen == [m.public_id for m in everything]
    assert pages == 3
    # And back: the previous link of the last page returns the page before it.
    last = api.get("/v1/messages?page_size=3").json()
    second = api.get(last["next"]).json()
    back = api.get(second["previous"]).json()
    assert [m["id"] for m in back["results"]] == [m.public_id for m in everything[:3]]
    assert back["previous"] is None
    # Filters apply to both places.
    only = api.get("/v1/messages?status=delivered&to=%2B14155550002").json()["results"]
    assert [m["id"] for m in only] == [old[2].public_id]


def test_the_twilio_compatible_fetch_and_list_find_moved_messages(tenant_key):
    tenant, key = tenant_key
    moved = _delivered(tenant, body="from the past")
    _moved(moved)
    current = message(tenant, due_in=3600)
    client = sdk_in_process(tenant.facade_account_sid, key)
    fetched = client.messages(message_sid(moved.public_id)).fetch()
    assert (fetched.body, fetched.status) == ("from the past", "delivered")
    listed = [m.sid for m in client.messages.list(page_size=1)]
    assert listed == [message_sid(current.public_id), message_sid(moved.public_id)]
    assert MessageHistory.objects.filter(id=moved.pk).exists()


def test_a_tenant_sets_and_reads_its_own_horizons(api, tenant_key):
    got = api.get("/v1/retention").json()
    assert got == {
        "content_days": None,
        "record_days": None,
        "effective_content_days": 30,
        "effective_record_days": 365,
        "history_after_hours": 48,
    }
    put = api.put("/v1/retention", {"content_days": 7, "record_days": None}, format="json")
    assert put.status_code == 200, put.content
    assert (put.json()["effective_content_days"], put.json()["effective_record_days"]) == (7, 365)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"content_days": 40, "record_days": 30}, "record_days"),
        ({"content_days": 0, "record_days": None}, "content_days"),
        ({"content_days": "x", "record_days": None}, "content_days"),
        ({"content_days": None, "record_days": 99999}, "record_days"),
        ({"content_days": None, "record_days": None, "keep": 1}, "keep"),
    ],
)
def test_bad_horizons_are_a_400_naming_the_field_and_change_nothing(api, tenant_key, body, field):
    api.put("/v1/retention", {"content_days": 5, "record_days": 50}, format="json")
    bad = api.put("/v1/retention", body, format="json")
    assert bad.status_code == 400
    assert list(bad.json()["error"]["fields"]) == [field]
    got = api.get("/v1/retention").json()
    assert (got["content_days"], got["record_days"]) == (5, 50)


def test_the_twilio_compatible_redact_cancel_and_delete_of_a_moved_message(tenant_key):
    from twilio.base.exceptions import TwilioRestException

    tenant, key = tenant_key
    msg = _delivered(tenant, body="old news")
    _moved(msg)
    client = sdk_in_process(tenant.facade_account_sid, key)
    sid = message_sid(msg.public_id)

    redacted = client.messages(sid).update(body="")
    assert (redacted.body, redacted.status) == ("", "delivered")
    row = MessageHistory.objects.get(id=msg.pk)
    assert row.document["message"]["body"] == "" and "*" in row.to

    with pytest.raises(TwilioRestException) as cancel:
        client.messages(sid).update(status="canceled")
    assert (cancel.value.status, cancel.value.code) == (409, 30409)

    assert client.messages(sid).delete() is True
    assert MessageHistory.objects.get(id=msg.pk).deleted
    with pytest.raises(TwilioRestException) as gone:
        client.messages(sid).fetch()
    assert gone.value.status == 404
    assert client.messages.list() == []
