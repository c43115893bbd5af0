"""Every operation checks its scope (smsgw.tenancy.permissions, scheduling.facade.api), generated from the
URL configuration: an endpoint or a method added without a declared scope fails here, and the scope
matrix (docs/api.md#scopes) holds row by row: a key lacking the scope gets 403 naming it and nothing
changes; a key holding only that scope gets past authorization."""

from __future__ import annotations

import base64
import re
from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.apps import apps
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from rest_framework.test import APIClient
from rest_framework.views import APIView

from receipts.models import WebhookDelivery, WebhookStatus
from receipts.webhooks import tenant_webhook_configure
from scheduling.facade.resources import message_sid, number_sid
from scheduling.lifecycle import transitions
from scheduling.models import Status
from smsgw.models import ApiKey, TenantSender, api_key_create
from smsgw.tenancy.permissions import operation_scope
from smsgw.tenancy.scopes import SCOPES
from tests.factories import RECIPIENT, message, tenant_with_key

pytestmark = pytest.mark.django_db

# Endpoints no API key reaches: the schema and its viewers, the probes, and the provider callbacks
# (authenticated by the provider's signature, receipts.api).
PUBLIC = {"openapi", "docs", "docs-swagger", "healthz", "readyz", "metrics", "receipts", "inbound"}
PUBLIC_PREFIXES = ("docs-asset-",)
API_PREFIXES = ("v1/", "2010-04-01/")
VERBS = ("GET", "POST", "PUT", "PATCH", "DELETE")

# The matrix as docs/api.md states it: (URL name, method) -> the scope it needs. The facade's POST on a
# message needs the scope of what its parameters do (cancel, redact), hence the third element.
EXPECTED: dict[tuple[str, str] | tuple[str, str, str], str] = {
    ("messages", "GET"): "messages:read",
    ("messages", "POST"): "messages:send",
    ("messages-batch", "POST"): "messages:send",
    ("message-detail", "GET"): "messages:read",
    ("message-detail", "PATCH"): "messages:write",
    ("message-cancel", "POST"): "messages:cancel",
    ("message-events", "GET"): "messages:read",
    ("message-redact", "POST"): "messages:delete",
    ("recipients-erase", "POST"): "recipients:erase",
    ("schedules", "GET"): "schedules:read",
    ("schedules", "POST"): "schedules:write",
    ("schedule-detail", "GET"): "schedules:read",
    ("schedule-detail", "PATCH"): "schedules:write",
    ("schedule-pause", "POST"): "schedules:write",
    ("schedule-resume", "POST"): "schedules:write",
    ("schedule-cancel", "POST"): "schedules:write",
    ("schedule-occurrences", "GET"): "schedules:read",
    ("schedule-versions", "GET"): "schedules:read",
    ("schedule-messages", "GET"): "schedules:read",
    ("campaigns", "GET"): "campaigns:read",
    ("campaigns", "POST"): "campaigns:write",
    ("campaign-detail", "GET"): "campaigns:read",
    ("campaign-messages", "GET"): "campaigns:read",
    ("campaign-errors", "GET"): "campaigns:read",
    ("campaign-pause", "POST"): "campaigns:write",
    ("campaign-resume", "POST"): "campaigns:write",
    ("campaign-cancel", "POST"): "campaigns:write",
    ("quiet-hours", "GET"): "quiet-hours:read",
    ("quiet-hours", "PUT"): "quiet-hours:write",
    ("quiet-hours", "DELETE"): "quiet-hours:write",
    ("retention", "GET"): "retention:read",
    ("retention", "PUT"): "retention:write",
    ("suppressions", "GET"): "suppressions:read",
    ("suppressions", "POST"): "suppressions:write",
    ("suppressions", "DELETE"): "suppressions:write",
    ("keywords", "GET"): "keywords:read",
    ("keywords", "PUT"): "keywords:write",
    ("routes", "GET"): "routes:read",
    ("routes-resolve", "GET"): "routes:read",
    ("exports", "GET"): "exports:read",
    ("export-detail", "GET"): "exports:read",
    ("export-download", "GET"): "exports:read",
    ("inbound-list", "GET"): "inbound:read",
    ("inbound-detail", "GET"): "inbound:read",
    ("conversation", "GET"): "inbound:read",
    ("capacity", "GET"): "capacity:read",
    ("capacity-sender", "PUT"): "capacity:write",
    ("capacity-sender", "DELETE"): "capacity:write",
    ("webhook-config", "GET"): "webhooks:manage",
    ("webhook-config", "PUT"): "webhooks:manage",
    ("webhook-config", "DELETE"): "webhooks:manage",
    ("webhook-replay", "POST"): "webhooks:manage",
    ("webhook-deliveries", "GET"): "webhooks:manage",
    ("facade-messages", "GET"): "messages:read",
    ("facade-messages", "POST"): "messages:send",
    ("facade-message", "GET"): "messages:read",
    ("facade-message", "POST", "cancel"): "messages:cancel",
    ("facade-message", "POST", "redact"): "messages:delete",
    ("facade-message", "DELETE"): "messages:delete",
    ("facade-numbers", "GET"): "webhooks:manage",
    ("facade-number", "GET"): "webhooks:manage",
    ("facade-number", "POST"): "webhooks:manage",
}


def api_patterns():
    """(route, URL name, view callback) of every pattern under the API's prefixes."""

    def walk(patterns, prefix=""):
        for p in patterns:
            if isinstance(p, URLResolver):
                yield from walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                yield prefix + str(p.pattern), p.name, p.callback

    return [
        (route, name, cb)
        for route, name, cb in walk(get_resolver().url_patterns)
        if route.startswith(API_PREFIXES) and not (name in PUBLIC or name.startswith(PUBLIC_PREFIXES))
    ]


def drf_methods(view_class) -> list[str]:
    """The methods the view handles (OPTIONS is DRF's metadata, needing no scope of its own)."""
    return [m.upper() for m in view_class.http_method_names if m != "options" and hasattr(view_class, m)]


def test_every_drf_operation_declares_a_known_scope():
    undeclared = []
    for route, _name, callback in api_patterns():
        view_class = getattr(callback, "cls", None)
        if view_class is None or not issubclass(view_class, APIView):
            continue
        for method in drf_methods(view_class):
            scope = operation_scope(view_class, method)
            if scope not in SCOPES:
                undeclared.append((route, method, scope))
    assert undeclared == []


def test_the_declared_scopes_are_the_documented_matrix():
    declared = {}
    for _route, name, callback in api_patterns():
        view_class = getattr(callback, "cls", None)
        if view_class is not None:
            declared |= {(name, m): operation_scope(view_class, m) for m in drf_methods(view_class)}
    assert declared == {k: v for k, v in EXPECTED.items() if not k[0].startswith("facade-")}


def _path(route: str, tenant) -> str:
    """The route with each converter filled: the tenant's account SID, else a dummy id."""

    def fill(match):
        return tenant.facade_account_sid if match.group(1) == "account_sid" else "x1"

    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", fill, route)


def test_a_key_without_scopes_is_refused_by_every_operation_of_every_api_pattern():
    """Generated from the URL configuration, plain Django views (the Twilio-compatible API) included:
    a key holding no scope gets 403 (or 405 for a method the endpoint does not have) everywhere."""
    tenant, _ = tenant_with_key("acme")
    _, raw = api_key_create(tenant=tenant, name="nothing", scopes=[])
    facade_auth = {"HTTP_AUTHORIZATION": _basic(tenant, raw)}
    answers = {}
    for route, name, _cb in api_patterns():
        client = APIClient()
        extra = facade_auth if route.startswith("2010-04-01/") else {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
        for method in VERBS:
            resp = getattr(client, method.lower())(_path(route, tenant), **extra)
            answers[(name, method)] = resp.status_code
    assert {k: v for k, v in answers.items() if v not in (403, 405)} == {}
    assert {k for k, v in answers.items() if v == 403} == {k[:2] for k in EXPECTED}


def test_a_view_that_declares_no_scope_fails_closed(rf):
    class Undeclared(APIView):
        def get(self, request):
            return None

    _, raw = tenant_with_key("acme")
    request = rf.get("/v1/undeclared", HTTP_AUTHORIZATION=f"Bearer {raw}")
    resp = Undeclared.as_view()(request)
    assert resp.status_code == 403 and resp.data["error"]["code"] == "missing_scope"
    assert "declares no scope" in resp.data["error"]["message"]
    assert ApiKey.objects.get().scopes == ["*"]


# --- the matrix --------------------------------------------------------------------------------------
def _basic(tenant, raw: str) -> str:
    return "Basic " + base64.b64encode(f"{tenant.facade_account_sid}:{raw}".encode()).decode()


def soon(hours: float = 2) -> str:
    at = timezone.now() + timedelta(hours=hours)
    return at.replace(second=0, microsecond=0, tzinfo=None).isoformat()


@pytest.fixture
def world(settings):
    """A tenant with one object of each kind, made through the API with a full-access key."""
    settings.WEBHOOK_ALLOW_PRIVATE = True  # the hook is never called
    tenant, raw = tenant_with_key("acme")
    full = APIClient()
    full.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    schedule = {"to": RECIPIENT, "body": "Take it", "rrule": "FREQ=HOURLY;INTERVAL=6", "start": soon(1)}
    sid = full.post("/v1/schedules", schedule, format="json").json()["id"]
    people = [{"phone": RECIPIENT, "first_name": "Ann"}]
    campaign = {"template": "Hi {first_name}", "send_at": soon(), "timezone": "UTC", "recipients": people}
    cid = full.post("/v1/campaigns", campaign, format="json").json()["id"]
    assert full.post("/v1/suppressions", {"to": "+14155550140"}, format="json").status_code == 201
    tenant_webhook_configure(tenant=tenant, url="https://127.0.0.1:9/hook")
    sent = message(tenant)
    transitions.transition(sent.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    delivery = WebhookDelivery.objects.get(tenant=tenant)
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status=WebhookStatus.DEAD)
    scheduled = message(tenant, due_in=3600)
    return {
        "tenant": tenant,
        "mid": scheduled.public_id,
        "sm": message_sid(scheduled.public_id),
        "pn": number_sid(TenantSender.objects.get(tenant=tenant, value=tenant.default_from).pk),
        "sid": sid,
        "cid": cid,
        "wid": delivery.webhook_id,
        "schedule": schedule,
        "campaign": campaign,
    }


def _form(data: dict) -> dict:
    return {"data": urlencode(data), "content_type": "application/x-www-form-urlencoded"}


def request_of(op, w) -> tuple[str, str, dict]:
    """(method, path, client kwargs) of a valid request for the operation: one that would change
    something for the write operations, were its scope not checked."""
    facade = f"/2010-04-01/Accounts/{w['tenant'].facade_account_sid}/Messages"
    numbers = f"/2010-04-01/Accounts/{w['tenant'].facade_account_sid}/IncomingPhoneNumbers"
    json = {"format": "json"}
    requests = {
        ("messages", "GET"): ("/v1/messages", {}),
        ("messages", "POST"): ("/v1/messages", {"data": {"to": RECIPIENT, "body": "hi"}, **json}),
        ("messages-batch", "POST"): (
            "/v1/messages/batch",
            {"data": {"messages": [{"to": RECIPIENT, "body": "hi"}]}, **json},
        ),
        ("message-detail", "GET"): (f"/v1/messages/{w['mid']}", {}),
        ("message-detail", "PATCH"): (f"/v1/messages/{w['mid']}", {"data": {"body": "edited"}, **json}),
        ("message-cancel", "POST"): (f"/v1/messages/{w['mid']}/cancel", {}),
        ("message-events", "GET"): (f"/v1/messages/{w['mid']}/events", {}),
        ("message-redact", "POST"): (f"/v1/messages/{w['mid']}/redact", {}),
        ("recipients-erase", "POST"): ("/v1/recipients/erase", {"data": {"to": RECIPIENT}, **json}),
        ("schedules", "GET"): ("/v1/schedules", {}),
        ("schedules", "POST"): ("/v1/schedules", {"data": w["schedule"], **json}),
        ("schedule-detail", "GET"): (f"/v1/schedules/{w['sid']}", {}),
        ("schedule-detail", "PATCH"): (f"/v1/schedules/{w['sid']}", {"data": {"body": "Two"}, **json}),
        ("schedule-pause", "POST"): (f"/v1/schedules/{w['sid']}/pause", {}),
        ("schedule-resume", "POST"): (f"/v1/schedules/{w['sid']}/resume", {}),
        ("schedule-cancel", "POST"): (f"/v1/schedules/{w['sid']}/cancel", {}),
        ("schedule-occurrences", "GET"): (f"/v1/schedules/{w['sid']}/occurrences", {}),
        ("schedule-versions", "GET"): (f"/v1/schedules/{w['sid']}/versions", {}),
        ("schedule-messages", "GET"): (f"/v1/schedules/{w['sid']}/messages", {}),
        ("campaigns", "GET"): ("/v1/campaigns", {}),
        ("campaigns", "POST"): ("/v1/campaigns", {"data": w["campaign"], **json}),
        ("campaign-detail", "GET"): (f"/v1/campaigns/{w['cid']}", {}),
        ("campaign-messages", "GET"): (f"/v1/campaigns/{w['cid']}/messages", {}),
        ("campaign-errors", "GET"): (f"/v1/campaigns/{w['cid']}/errors", {}),
        ("campaign-pause", "POST"): (f"/v1/campaigns/{w['cid']}/pause", {}),
        ("campaign-resume", "POST"): (f"/v1/campaigns/{w['cid']}/resume", {}),
        ("campaign-cancel", "POST"): (f"/v1/campaigns/{w['cid']}/cancel", {}),
        ("quiet-hours", "GET"): ("/v1/quiet-hours", {}),
        ("quiet-hours", "PUT"): ("/v1/quiet-hours", {"data": {"start": "21:00", "end": "08:00"}, **json}),
        ("quiet-hours", "DELETE"): ("/v1/quiet-hours", {}),
        ("retention", "GET"): ("/v1/retention", {}),
        ("retention", "PUT"): ("/v1/retention", {"data": {"content_days": 7, "record_days": None}, **json}),
        ("suppressions", "GET"): ("/v1/suppressions", {}),
        ("suppressions", "POST"): ("/v1/suppressions", {"data": {"to": "+14155550141"}, **json}),
        ("suppressions", "DELETE"): ("/v1/suppressions?to=%2B14155550140", {}),
        ("keywords", "GET"): ("/v1/keywords", {}),
        ("keywords", "PUT"): (
            "/v1/keywords",
            {"data": {"rules": [{"keyword": "C", "action": "cancel", "reply": "Cancelled."}]}, **json},
        ),
        ("routes", "GET"): ("/v1/routes", {}),
        ("routes-resolve", "GET"): ("/v1/routes/resolve?to=%2B14155550123", {}),
        ("exports", "GET"): ("/v1/exports", {}),
        ("export-detail", "GET"): ("/v1/exports/exp_unknown", {}),
        ("export-download", "GET"): ("/v1/exports/exp_unknown/download", {}),
        ("inbound-list", "GET"): ("/v1/inbound", {}),
        ("inbound-detail", "GET"): ("/v1/inbound/in_unknown", {}),
        ("conversation", "GET"): ("/v1/conversations/+14155550101", {}),
        ("capacity", "GET"): ("/v1/capacity", {}),
        ("capacity-sender", "PUT"): (
            "/v1/capacity/senders/+14155550100",
            {"data": {"segments_per_second": 2}, **json},
        ),
        ("capacity-sender", "DELETE"): ("/v1/capacity/senders/+14155550100", {}),
        ("webhook-config", "GET"): ("/v1/webhook", {}),
        ("webhook-config", "PUT"): ("/v1/webhook", {"data": {"url": "https://127.0.0.1:9/other"}, **json}),
        ("webhook-config", "DELETE"): ("/v1/webhook", {}),
        ("webhook-replay", "POST"): (f"/v1/webhook-deliveries/{w['wid']}/replay", {}),
        ("webhook-deliveries", "GET"): ("/v1/webhook-deliveries", {"data": {"status": "dead"}}),
        ("facade-messages", "GET"): (f"{facade}.json", {}),
        ("facade-messages", "POST"): (f"{facade}.json", _form({"To": RECIPIENT, "Body": "hi"})),
        ("facade-message", "GET"): (f"{facade}/{w['sm']}.json", {}),
        ("facade-message", "POST", "cancel"): (f"{facade}/{w['sm']}.json", _form({"Status": "canceled"})),
        ("facade-message", "POST", "redact"): (f"{facade}/{w['sm']}.json", _form({"Body": ""})),
        ("facade-message", "DELETE"): (f"{facade}/{w['sm']}.json", {}),
        ("facade-numbers", "GET"): (f"{numbers}.json", {}),
        ("facade-number", "GET"): (f"{numbers}/{w['pn']}.json", {}),
        ("facade-number", "POST"): (
            f"{numbers}/{w['pn']}.json",
            _form({"SmsUrl": "https://127.0.0.1:9/sms"}),
        ),
    }
    path, kwargs = requests[op]
    return op[1], path, kwargs


def rows() -> dict:
    """Every row the API could change, ApiKey.last_used_at aside (authentication writes it)."""
    state = {}
    for label in ("smsgw", "scheduling", "delivery", "receipts"):
        for model in apps.get_app_config(label).get_models():
            values = list(model.objects.order_by("pk").values())
            if model is ApiKey:
                values = [{**v, "last_used_at": None} for v in values]
            state[model._meta.label] = values
    return state


def call(w, op, scopes: list[str]):
    tenant = w["tenant"]
    _, raw = api_key_create(tenant=tenant, name="matrix", scopes=scopes)
    method, path, kwargs = request_of(op, w)
    client = APIClient()
    if op[0].startswith("facade-"):
        client.credentials(HTTP_AUTHORIZATION=_basic(tenant, raw))
    else:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return getattr(client, method.lower())(path, **kwargs)


@pytest.mark.parametrize("op", list(EXPECTED), ids=["-".join(op) for op in EXPECTED])
def test_scope_matrix(world, op):
    scope = EXPECTED[op]
    before = rows()
    refused = call(world, op, [s for s in SCOPES if s != scope])
    assert refused.status_code == 403, refused.content
    if op[0].startswith("facade-"):
        assert refused.json()["code"] == 20403 and repr(scope) in refused.json()["message"]
    else:
        error = refused.json()["error"]
        assert error["code"] == "missing_scope" and error["required_scope"] == scope
        assert repr(scope) in error["message"]
    after = rows()
    after["smsgw.ApiKey"] = [k for k in after["smsgw.ApiKey"] if k["name"] != "matrix"]
    assert after == before

    allowed = call(world, op, [scope])
    assert allowed.status_code != 403, allowed.content
    assert allowed.status_code < 500


def test_every_api_operation_has_a_matrix_row():
    """A new operation needs its row in EXPECTED (and docs/api.md): the zero-scope walk above lists every
    pattern's methods that answer 403; this one checks the matrix names only real URL names."""
    names = {name for _route, name, _cb in api_patterns()}
    assert {op[0] for op in EXPECTED} == names


def test_options_needs_a_key_but_no_scope():
    tenant, _ = tenant_with_key("acme")
    _, raw = api_key_create(tenant=tenant, name="nothing", scopes=[])
    client = APIClient()
    assert client.options("/v1/messages").status_code == 401
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.options("/v1/messages").status_code == 200
    assert client.head("/v1/messages").status_code == 403


def test_the_schema_states_each_operations_scope():
    schema = APIClient().get("/v1/openapi.json").json()
    stated = {}
    for route, name, callback in api_patterns():
        view_class = getattr(callback, "cls", None)
        if view_class is None:
            continue
        path = "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)
        for method in drf_methods(view_class):
            operation = schema["paths"][path][method.lower()]
            stated[(name, method)] = operation["x-required-scopes"]
            assert f"`{operation['x-required-scopes'][0]}`" in operation["description"]
            assert "403" in operation["responses"]
    assert stated == {k: [v] for k, v in EXPECTED.items() if not k[0].startswith("facade-")}


def test_a_missing_scope_answer_matches_the_served_schema():
    from tests.smsgw.http.test_openapi_contract import Contract, served_schema

    tenant, _ = tenant_with_key("acme")
    _, raw = api_key_create(tenant=tenant, name="reader", scopes=["messages:read"])
    c = Contract(served_schema(), raw)
    c.call("post", "/v1/messages", 403, data={"to": RECIPIENT, "body": "hi"})
    c.call("put", "/v1/capacity/senders/+14155550100", 403, data={"segments_per_second": 1})
    c.call("get", "/v1/schedules", 403)
