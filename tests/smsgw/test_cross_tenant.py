"""Tenants cannot touch each other (issue 37): tenant A's key on tenant B's objects gets 404 or 403 and
changes nothing, on every tenant-scoped operation of /v1 and the Twilio-compatible API; and A cannot send
as B's number, alphanumeric id or sender pool on any path that names a sender (docs/senders.md)."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from delivery.guards import suppression
from delivery.models import SenderCapacity, Suppression, SuppressionChange
from delivery.providers import get_adapter
from receipts.models import WebhookDelivery
from scheduling.facade.resources import message_sid
from scheduling.messages.service import message_create
from scheduling.models import Campaign, Message, MessageEvent, Schedule
from smsgw.models import Tenant, TenantSender
from tests.factories import campaign_with_messages, message, recipient, sender_for, tenant_with_key

pytestmark = pytest.mark.django_db

A_NUMBER, B_NUMBER = "+12025550143", "+12125550199"
B_BRAND = "BRANDB"
B_POOL = "MG" + "b" * 32
TO = recipient(1)


def _client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


@pytest.fixture
def two(db, settings):
    """A and B, each with its own number; B also owns an alphanumeric id and a sender pool, and has a
    message, a schedule, a campaign, an opt-out, a webhook, a webhook delivery and a capacity cap."""
    settings.SMSGW_WEBHOOK_ALLOW_HTTP = True
    a, a_key = tenant_with_key("tenant-a", default_from=A_NUMBER)
    b, b_key = tenant_with_key("tenant-b", default_from=B_NUMBER)
    sender_for(b, B_BRAND)
    sender_for(b, B_POOL)
    b_api = _client(b_key)
    schedule = b_api.post(
        "/v1/schedules",
        {"to": TO, "body": "b's", "rrule": "FREQ=DAILY", "start": _soon(), "timezone": "UTC"},
        format="json",
    )
    assert schedule.status_code == 201, schedule.content
    msg = message(b)
    campaign, _ = campaign_with_messages(b, 2)
    suppression.suppression_add(tenant_id=b.pk, number=recipient(9), sender=B_NUMBER, source="api")
    Tenant.objects.filter(pk=b.pk).update(webhook_url="http://127.0.0.1:9/b", webhook_secret="whsec_b")
    delivery = WebhookDelivery.objects.create(
        webhook_id="msg_b_delivery",
        tenant=b,
        message=msg,
        event_type="message.sent",
        payload={},
        next_attempt_at=timezone.now(),
        created_at=timezone.now(),
        status="failed",
    )
    adapter = get_adapter()
    SenderCapacity.objects.create(
        provider=adapter.name, account=adapter.account, sender=B_NUMBER, segments_per_second=0.5, tenant=b
    )
    return {
        "a": a,
        "b": b,
        "a_api": _client(a_key),
        "a_key": a_key,
        "b_api": b_api,
        "message": msg,
        "schedule": schedule.json()["id"],
        "campaign": campaign.public_id,
        "delivery": delivery.webhook_id,
    }


def _soon() -> str:
    """An hour from now, as a UTC wall time without an offset (a schedule's start, with timezone UTC)."""
    return (timezone.now() + timedelta(hours=1)).replace(microsecond=0, tzinfo=None).isoformat()


def _state() -> dict:
    """Every row a tenant's request could change, whole."""
    models = (
        Message,
        MessageEvent,
        Schedule,
        Campaign,
        Suppression,
        SuppressionChange,
        SenderCapacity,
        WebhookDelivery,
        TenantSender,
    )
    state = {m.__name__: list(m.objects.order_by("pk").values()) for m in models}
    state["Tenant"] = list(Tenant.objects.order_by("pk").values())
    return state


# (method, path, JSON body): {m} B's message, {s} B's schedule, {c} B's campaign, {d} B's webhook delivery.
ON_B_OBJECTS = [
    ("get", "/v1/messages/{m}", None),
    ("patch", "/v1/messages/{m}", {"body": "hijacked"}),
    ("post", "/v1/messages/{m}/cancel", None),
    ("get", "/v1/messages/{m}/events", None),
    ("get", "/v1/schedules/{s}", None),
    ("patch", "/v1/schedules/{s}", {"body": "hijacked"}),
    ("post", "/v1/schedules/{s}/pause", None),
    ("post", "/v1/schedules/{s}/resume", None),
    ("post", "/v1/schedules/{s}/cancel", None),
    ("get", "/v1/schedules/{s}/occurrences", None),
    ("get", "/v1/schedules/{s}/versions", None),
    ("get", "/v1/schedules/{s}/messages", None),
    ("get", "/v1/campaigns/{c}", None),
    ("get", "/v1/campaigns/{c}/messages", None),
    ("get", "/v1/campaigns/{c}/errors", None),
    ("post", "/v1/campaigns/{c}/pause", None),
    ("post", "/v1/campaigns/{c}/resume", None),
    ("post", "/v1/campaigns/{c}/cancel", None),
    ("post", "/v1/webhook-deliveries/{d}/replay", None),
    ("put", "/v1/capacity/senders/" + B_NUMBER, {"segments_per_second": 0.001}),
    ("delete", "/v1/capacity/senders/" + B_NUMBER, None),
    ("put", "/v1/capacity/senders/" + B_BRAND, {"segments_per_second": 0.001}),
    ("put", "/v1/capacity/senders/" + B_POOL, {"segments_per_second": 0.001}),
]


@pytest.mark.parametrize(
    ("method", "path", "body"), ON_B_OBJECTS, ids=[f"{m} {p}" for m, p, _ in ON_B_OBJECTS]
)
def test_tenant_a_on_tenant_bs_objects_is_404_or_403_and_changes_nothing(two, method, path, body):
    before = _state()
    url = path.format(m=two["message"].public_id, s=two["schedule"], c=two["campaign"], d=two["delivery"])
    resp = (
        getattr(two["a_api"], method)(url, body, format="json")
        if body
        else getattr(two["a_api"], method)(url)
    )
    assert resp.status_code in (403, 404), (url, resp.status_code, resp.content)
    assert _state() == before


@pytest.mark.parametrize("path", [p for m, p, _ in ON_B_OBJECTS if m == "get"])
def test_tenant_bs_own_key_reaches_each_object_the_matrix_names(two, path):
    """The matrix above is not vacuous: the same paths answer B."""
    url = path.format(m=two["message"].public_id, s=two["schedule"], c=two["campaign"], d=two["delivery"])
    assert two["b_api"].get(url).status_code == 200


def test_tenant_a_sees_none_of_tenant_bs_objects_in_its_lists(two):
    api = two["a_api"]
    for path in ("/v1/messages", "/v1/schedules", "/v1/campaigns", "/v1/suppressions"):
        resp = api.get(path)
        assert resp.status_code == 200 and resp.json()["results"] == [], path
    assert api.get("/v1/webhook").json() == {"url": "", "has_secret": False}
    senders = {s["sender"] for s in api.get("/v1/capacity").json()["senders"]}
    assert senders == {A_NUMBER}
    # Removing an opt-out B has, by A: not found, and B's entry stays.
    before = _state()
    assert api.delete(f"/v1/suppressions?number=%2B{recipient(9)[1:]}").status_code == 404
    assert _state() == before


def test_tenant_a_through_the_facade_never_reaches_tenant_b(two):
    a, b = two["a"], two["b"]
    sid = message_sid(two["message"].public_id)
    auth = "Basic " + base64.b64encode(f"{a.facade_account_sid}:{two['a_key']}".encode()).decode()
    client = Client(HTTP_AUTHORIZATION=auth)
    before = _state()
    base = f"/2010-04-01/Accounts/{a.facade_account_sid}/Messages"
    assert client.get(f"{base}/{sid}.json").status_code == 404
    assert client.post(f"{base}/{sid}.json", {"Status": "canceled"}).status_code == 404
    assert client.post(f"{base}/{sid}.json", {"Body": ""}).status_code == 404
    assert client.delete(f"{base}/{sid}.json").status_code == 404
    assert client.get(f"{base}.json").json()["messages"] == []
    # A's key on B's account: not found, as any account that is not the key's.
    b_base = f"/2010-04-01/Accounts/{b.facade_account_sid}/Messages"
    assert client.get(f"{b_base}/{sid}.json").status_code == 404
    assert client.get(f"{b_base}.json").status_code == 404
    assert _state() == before


def test_tenant_a_does_not_see_a_rule_for_all_tenants_leg_that_sends_from_bs_sender(two):
    from delivery.routing.models import RouteLeg, RouteRule
    from delivery.routing.rules import routes_cache_clear

    rule = RouteRule.objects.create(name="all-us", country="US")
    RouteLeg.objects.create(rule=rule, position=0, provider="twilio", sender=B_NUMBER, weight=1)
    RouteLeg.objects.create(rule=rule, position=1, provider="twilio", sender="", weight=0)
    routes_cache_clear()
    api = two["a_api"]
    [listed] = api.get("/v1/routes").json()["results"]
    assert [leg["sender"] for leg in listed["legs"]] == [""]
    assert B_NUMBER not in json.dumps(api.get("/v1/routes/resolve", {"to": TO}).json())
    # A's message takes the leg A may use; B's takes B's number.
    sent = api.post("/v1/messages", {"to": TO, "body": "hi"}, format="json")
    assert sent.status_code == 201, sent.content
    mine = Message.objects.get(public_id=sent.json()["id"])
    assert mine.from_number == A_NUMBER and [leg["from"] for leg in mine.route_plan] == [A_NUMBER]
    b_msg, _ = message_create(tenant=two["b"], actor="test", data={"to": TO, "body": "hi"})
    assert b_msg.from_number == B_NUMBER and [leg["from"] for leg in b_msg.route_plan] == [B_NUMBER] * 2


# --- A cannot send as B -------------------------------------------------------------------------------

# Each of B's senders as a request names it: (field, value).
B_SENDERS = [("from", B_NUMBER), ("from", B_BRAND), ("messaging_service_sid", B_POOL)]
SENDER_IDS = ["number", "alphanumeric", "pool"]


def _refused(resp, field: str) -> None:
    assert resp.status_code == 400, resp.content
    assert field in resp.json()["error"]["fields"], resp.json()
    assert "not one of this tenant's senders" in resp.json()["error"]["fields"][field][0]


@pytest.mark.parametrize(("field", "value"), B_SENDERS, ids=SENDER_IDS)
def test_a_cannot_send_as_b_on_any_v1_path(two, field, value):
    api = two["a_api"]
    before = _state()
    _refused(api.post("/v1/messages", {"to": TO, "body": "hi", field: value}, format="json"), field)
    batch = api.post(
        "/v1/messages/batch",
        {"messages": [{"to": TO, "body": "mine"}, {"to": TO, "body": "as b", field: value}]},
        format="json",
    )
    assert batch.status_code == 200, batch.content
    ok, refused = batch.json()["results"]
    assert ok["status"] == 201 and refused["status"] == 400
    assert field in refused["error"]["fields"]
    assert Message.objects.filter(tenant=two["a"]).count() == 1  # the valid item only
    Message.objects.filter(tenant=two["a"]).delete()
    assert _state() == before
    own = api.post("/v1/messages", {"to": TO, "body": "hi", "send_at": _soon() + "Z"}, format="json").json()[
        "id"
    ]
    before = _state()
    _refused(api.patch(f"/v1/messages/{own}", {field: value}, format="json"), field)
    schedule = {"to": TO, "body": "x", "rrule": "FREQ=DAILY", "start": _soon(), "timezone": "UTC"}
    _refused(api.post("/v1/schedules", {**schedule, field: value}, format="json"), field)
    campaign = {
        "template": "hi {first_name}",
        "send_at": _soon() + "Z",
        "recipients": [{"phone": TO, "first_name": "N"}],
    }
    _refused(api.post("/v1/campaigns", {**campaign, field: value}, format="json"), field)
    assert _state() == before
    mine = api.post("/v1/schedules", schedule, format="json").json()["id"]
    before = _state()
    _refused(api.patch(f"/v1/schedules/{mine}", {field: value}, format="json"), field)
    assert _state() == before


@pytest.mark.parametrize(
    ("param", "value"),
    [("From", B_NUMBER), ("From", B_BRAND), ("MessagingServiceSid", B_POOL), ("From", B_POOL)],
)
def test_a_cannot_send_as_b_through_the_facade(two, param, value):
    a = two["a"]
    auth = "Basic " + base64.b64encode(f"{a.facade_account_sid}:{two['a_key']}".encode()).decode()
    before = _state()
    resp = Client(HTTP_AUTHORIZATION=auth).post(
        f"/2010-04-01/Accounts/{a.facade_account_sid}/Messages.json", {"To": TO, "Body": "hi", param: value}
    )
    assert resp.status_code == 400 and resp.json()["code"] == 21606, resp.content
    assert _state() == before


def test_a_sender_nobody_owns_is_refused_as_anothers_is(two):
    """The same answer either way: a tenant cannot probe which senders other tenants have."""
    api = two["a_api"]
    theirs = api.post("/v1/messages", {"to": TO, "body": "hi", "from": B_NUMBER}, format="json").json()
    nobodys = api.post("/v1/messages", {"to": TO, "body": "hi", "from": "+12025550100"}, format="json").json()
    # Every member the same but the request's own id.
    assert theirs.pop("request_id") != nobodys.pop("request_id")
    assert theirs == nobodys
    assert theirs["error"]["fields"] == nobodys["error"]["fields"]
