"""POST /v1/messages/batch: many distinct messages in one request, each with its own answer (what a
single POST /v1/messages would have answered), its own idempotency key, and nothing stored for a refused
item. Runs on SQLite and on PostgreSQL (the bulk insert has a statement of its own there)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from delivery.guards import suppression
from scheduling.messages import service as services
from scheduling.models import Message, MessageEvent, Status
from tests.factories import RECIPIENT, SENDER, recipient, tenant_with_key

# SQLite half too: a message's birth writes differently on SQLite (scheduling.messages.birth).
pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]
UK = "+442079460123"  # Ofcom drama range (fictional), valid for libphonenumber


def batch(api, items, **kwargs):
    return api.post("/v1/messages/batch", {"messages": items}, format="json", **kwargs)


def later(hours: int = 2) -> str:
    return (timezone.now() + timedelta(hours=hours)).replace(microsecond=0).isoformat()


def test_each_item_is_stored_as_a_single_post_would_store_it(api):
    items = [
        {"to": recipient(1), "body": "now"},
        {"to": recipient(2), "body": "later", "send_at": later(), "metadata": {"order": "A-1"}},
        {"to": recipient(3), "body": "9 am", "send_at": "2027-03-10T09:00:00", "timezone": "Europe/London"},
    ]
    resp = batch(api, items)
    assert resp.status_code == 200, resp.content
    data = resp.json()
    assert (data["created"], data["replayed"], data["refused"]) == (3, 0, 0)
    assert [r["index"] for r in data["results"]] == [0, 1, 2]
    assert [r["status"] for r in data["results"]] == [201, 201, 201]
    ids = [r["message"]["id"] for r in data["results"]]
    stored = {m.public_id: m for m in Message.objects.filter(tenant=api.tenant)}
    assert set(stored) == set(ids)
    for item, answer in zip(items, data["results"], strict=True):
        m = stored[answer["message"]["id"]]
        assert (m.to, m.body, m.status, m.from_number) == (item["to"], item["body"], Status.SCHEDULED, SENDER)
        assert answer["message"] == api.get(f"/v1/messages/{m.public_id}").json()  # the same resource
        assert list(m.events.values_list("kind", flat=True)) == ["created"]
    assert stored[ids[1]].metadata == {"order": "A-1"}
    assert stored[ids[2]].requested_timezone == "Europe/London"
    assert stored[ids[2]].due_at.isoformat().startswith("2027-03-10T09:00:00")  # GMT in March


def test_a_refused_item_stores_nothing_and_the_others_are_stored(api):
    suppression.suppression_add(tenant_id=api.tenant.pk, number=recipient(4), source="api")
    items = [
        {"to": recipient(1), "body": "ok"},
        {"to": "+1555", "body": "bad number"},
        {"to": recipient(2), "body": ""},
        {"to": recipient(3), "body": "x", "sendAt": "tomorrow"},
        {"to": recipient(4), "body": "opted out"},
        {"to": UK, "body": "not an allowed country"},
        {"to": recipient(5), "body": "x", "timezone": "Mars/Olympus", "send_at": "2027-01-01T09:00:00"},
        "not an object",
        {"to": recipient(6), "body": "x", "idempotency_key": ""},
        {"to": recipient(7), "body": "ok too", "priority": "bulk"},
    ]
    resp = batch(api, items)
    assert resp.status_code == 200, resp.content
    results = resp.json()["results"]
    assert [r["status"] for r in results] == [201, 400, 400, 400, 400, 400, 400, 400, 400, 201]
    fields = [sorted(r["error"]["fields"]) if "error" in r else None for r in results]
    assert fields == [
        None,
        ["to"],
        ["body"],
        ["sendAt"],
        ["to"],
        ["to"],
        ["timezone"],
        ["item"],
        ["idempotency_key"],
        None,
    ]
    assert "opted out" in results[4]["error"]["fields"]["to"][0]
    assert "country_not_allowed" in results[5]["error"]["fields"]["to"][0]
    assert resp.json()["refused"] == 8
    # Each refusal is also problem details (docs/errors.md), each field with its own code.
    codes = [
        [(e["field"], e["code"]) for e in r["problem"]["errors"]] if "problem" in r else None for r in results
    ]
    assert codes == [
        None,
        [("to", "invalid")],
        [("body", "blank")],
        [("sendAt", "invalid")],
        [("to", "suppressed")],
        [("to", "destination")],
        [("timezone", "invalid_timezone")],
        [("item", "invalid")],
        [("idempotency_key", "invalid")],
        None,
    ]
    refused = results[6]["problem"]
    assert (refused["status"], refused["code"], refused["type"]) == (400, "invalid", "/docs/errors/#invalid")
    assert "request_id" not in refused and "error" not in refused  # the response's and the item's own
    assert sorted(Message.objects.values_list("to", flat=True)) == [recipient(1), recipient(7)]
    assert MessageEvent.objects.count() == 2


def test_per_item_keys_replay_and_a_changed_item_is_a_422(api):
    items = [
        {"to": recipient(1), "body": "a", "idempotency_key": "k-1"},
        {"to": recipient(2), "body": "b", "idempotency_key": "k-2"},
        {"to": recipient(3), "body": "c"},
    ]
    first = batch(api, items).json()["results"]
    assert [r["status"] for r in first] == [201, 201, 201]

    again = batch(api, [*items[:2], {"to": recipient(1), "body": "changed", "idempotency_key": "k-1"}])
    results = again.json()["results"]
    assert [r["status"] for r in results] == [200, 200, 422]
    assert [r["message"]["id"] for r in results[:2]] == [r["message"]["id"] for r in first[:2]]
    assert results[2]["error"]["code"] == "idempotency_key_reused"
    assert Message.objects.count() == 3

    # The same key through a single POST /v1/messages is the same message.
    single = api.post(
        "/v1/messages", {"to": recipient(1), "body": "a"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )
    assert single.status_code == 200 and single.json()["id"] == first[0]["message"]["id"]


def test_a_key_repeated_within_the_batch_is_one_message(api):
    same = {"to": recipient(1), "body": "a", "idempotency_key": "dup"}
    resp = batch(api, [same, dict(same), {**same, "body": "other"}])
    results = resp.json()["results"]
    assert [r["status"] for r in results] == [201, 200, 422]
    assert results[0]["message"]["id"] == results[1]["message"]["id"]
    assert Message.objects.count() == 1


def test_the_request_itself_must_be_a_list_of_1_to_the_maximum(api, settings):
    for body, field in [
        ([], "body"),
        ({}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": {"to": RECIPIENT}}, "messages"),
        ({"messages": [{"to": RECIPIENT, "body": "x"}], "extra": 1}, "extra"),
    ]:
        resp = api.post("/v1/messages/batch", body, format="json")
        assert resp.status_code == 400, (body, resp.content)
        assert list(resp.json()["error"]["fields"]) == [field]
    too_many = [{"to": recipient(i), "body": "x"} for i in range(settings.BATCH_MAX_MESSAGES + 1)]
    resp = batch(api, too_many)
    assert resp.status_code == 400 and list(resp.json()["error"]["fields"]) == ["messages"]
    assert Message.objects.count() == 0


def test_a_quota_refuses_the_items_past_it_and_keeps_the_rest(db):
    tenant, key = tenant_with_key("quota", daily_message_quota=3)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    resp = batch(api, [{"to": recipient(i), "body": f"m{i}"} for i in range(5)])
    results = resp.json()["results"]
    assert [r["status"] for r in results] == [201, 201, 201, 429, 429]
    assert results[3]["error"]["code"] == "quota_exceeded" and results[3]["error"]["limit"] == 3
    stored = Message.objects.filter(tenant=tenant)
    assert sorted(stored.values_list("to", flat=True)) == [recipient(0), recipient(1), recipient(2)]
    assert set(stored.values_list("status", flat=True)) == {Status.SCHEDULED}
    assert MessageEvent.objects.filter(message__tenant=tenant).count() == 3


def test_another_tenants_key_is_never_replayed(api):
    batch(api, [{"to": recipient(1), "body": "a", "idempotency_key": "shared"}])
    other, key = tenant_with_key("other")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    resp = batch(client, [{"to": recipient(1), "body": "a", "idempotency_key": "shared"}])
    assert resp.json()["results"][0]["status"] == 201
    assert Message.objects.filter(tenant=other).count() == 1


def test_a_batch_costs_a_few_statements_whatever_its_size(api):
    """The keys, the guards and the suppression list are asked once, and the messages go in together."""
    counts = []
    for n in (1, 10, 200):  # the first pays for what a key's first request loads once
        items = [
            {"to": recipient(1000 * n + i), "body": "x", "idempotency_key": f"{n}-{i}"} for i in range(n)
        ]
        with CaptureQueriesContext(connection) as queries:
            resp = batch(api, items)
        assert resp.json()["created"] == n
        counts.append(len(queries))
    assert counts[1] == counts[2], counts


def test_without_a_key_the_batch_needs_a_tenant(db):
    resp = APIClient().post(
        "/v1/messages/batch", {"messages": [{"to": RECIPIENT, "body": "x"}]}, format="json"
    )
    assert resp.status_code == 401
    assert Message.objects.count() == 0


@pytest.mark.parametrize("quota", [0, 100], ids=["together", "one-by-one"])
@pytest.mark.parametrize("same_body", [True, False], ids=["same-body", "other-body"])
def test_a_key_another_request_stores_first_is_its_replay(quota, same_body, monkeypatch):
    """Another request commits the same key after the batch looked its keys up and before it inserts
    (the insert then finds the key there): the item is that message's replay, or a 422 if its body
    differs; the batch's other items are stored, and the key is one message."""
    tenant, key = tenant_with_key("race", daily_message_quota=quota)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    build = services.message_build
    other: list[Message] = []
    started = []

    def the_other_request_first(**kwargs):
        if not started:  # once: the other request's own build comes through here too
            started.append(True)
            data = {"to": recipient(1), "body": "a" if same_body else "other"}
            other.append(
                services.message_create(tenant=tenant, actor="other", data=data, idempotency_key="k")[0]
            )
        return build(**kwargs)

    monkeypatch.setattr(services, "message_build", the_other_request_first)
    resp = batch(
        api, [{"to": recipient(1), "body": "a", "idempotency_key": "k"}, {"to": recipient(2), "body": "b"}]
    )

    results = resp.json()["results"]
    assert [r["status"] for r in results] == [200 if same_body else 422, 201]
    if same_body:
        assert results[0]["message"]["id"] == other[0].public_id
    else:
        assert results[0]["error"]["code"] == "idempotency_key_reused"
    assert Message.objects.filter(tenant=tenant, idempotency_key="k").get().body == (
        "a" if same_body else "other"
    )
    assert sorted(Message.objects.filter(tenant=tenant).values_list("to", flat=True)) == [
        recipient(1),
        recipient(2),
    ]
    assert MessageEvent.objects.filter(message__tenant=tenant).count() == 2


def test_a_batch_near_the_general_body_cap_is_still_taken(api, settings):
    # The batch keeps SMSGW_API_MAX_BODY_BYTES: only single-object bodies have the smaller
    # SMSGW_API_MAX_OBJECT_BYTES (smsgw.http.boundary.max_body_bytes).
    body = "x" * 900  # 6 segments
    items = [{"to": recipient(i), "body": body} for i in range(settings.BATCH_MAX_MESSAGES)]
    size = len(json.dumps({"messages": items}))
    assert settings.API_MAX_OBJECT_BYTES * 10 < size <= settings.API_MAX_BODY_BYTES
    resp = batch(api, items)
    assert resp.status_code == 200, resp.content[:300]
    assert resp.json()["created"] == settings.BATCH_MAX_MESSAGES
    assert Message.objects.filter(body=body).count() == settings.BATCH_MAX_MESSAGES
