"""`GET /v1/routes` and `GET /v1/routes/resolve`: a tenant reads its own rules, those for all tenants and the
settings' in the order they are tried, never another tenant's; resolve answers the route a message would
get; bad input is a 400 naming the parameter."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from delivery.routing.rules import plan
from smsgw.config.routes import parse
from tests.delivery.routing.helpers import route_rule
from tests.factories import sender_for, tenant_with_key

pytestmark = pytest.mark.django_db
GB = "+447400123456"
US = "+14155550123"


@pytest.fixture
def routes(settings, api):
    settings.SMSGW_PROVIDER = "twilio"
    settings.SMSGW_ROUTES = parse(
        '[{"name": "us", "country": "US", "legs": [{"provider": "twilio"}]}]',
        ["twilio", "vonage"],
        ["transactional", "bulk"],
    )
    other = tenant_with_key("other")[0]
    # The senders the tenants' own rules name are theirs (smsgw.tenancy.senders).
    sender_for(other, "OTHERCO")
    sender_for(api.tenant, "ACME")
    route_rule(other, "secret", [("vonage", "", "OTHERCO", 1)], country="GB")
    route_rule(None, "gb-all", [("twilio", "", "", 1)], country="GB")
    route_rule(
        api.tenant,
        "gb-bulk",
        [("vonage", "", "ACME", 3), ("twilio", "", "+14155550100", 0)],
        country="GB",
        priority="bulk",
    )
    route_rule(api.tenant, "off", [("twilio", "", "", 1)], enabled=False)
    return other


def test_list_is_the_order_rules_are_tried_and_never_another_tenants(api, routes):
    response = api.get("/v1/routes")
    assert response.status_code == 200
    body = response.json()
    assert [r["route"] for r in body["results"]] == ["tenant:gb-bulk", "all:gb-all", "settings:us"]
    first = body["results"][0]
    assert first == {
        "route": "tenant:gb-bulk",
        "source": "tenant",
        "name": "gb-bulk",
        "country": "GB",
        "prefix": "",
        "priority": "bulk",
        "legs": [
            {"provider": "vonage", "account": "", "sender": "ACME", "weight": 3},
            {"provider": "twilio", "account": "", "sender": "+14155550100", "weight": 0},
        ],
    }
    assert body["default"] == {
        "route": "default",
        "legs": [{"provider": "twilio", "account": "", "sender": "", "weight": 1}],
    }
    assert "secret" not in response.content.decode() and "OTHERCO" not in response.content.decode()

    other_api = APIClient()
    other_api.credentials(HTTP_AUTHORIZATION=f"Bearer {tenant_with_key('third')[1]}")
    assert [r["route"] for r in other_api.get("/v1/routes").json()["results"]] == [
        "all:gb-all",
        "settings:us",
    ]


def test_resolve_answers_the_route_a_message_gets(api, routes):
    response = api.get("/v1/routes/resolve", {"to": "+44 7400 123456", "priority": "bulk"})
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["to"] == GB and body["country"] == "GB" and body["priority"] == "bulk"
    assert body["route"] == "tenant:gb-bulk"
    assert [(leg["provider"], leg["weight"]) for leg in body["legs"]] == [("vonage", 3), ("twilio", 0)]
    assert body["route"] == plan(api.tenant.pk, GB, "bulk", seed="m").route

    # Transactional (the default class): the tenant's bulk rule does not match; the one for all does.
    assert api.get("/v1/routes/resolve", {"to": GB}).json()["route"] == "all:gb-all"
    assert api.get("/v1/routes/resolve", {"to": US}).json()["route"] == "settings:us"
    french = api.get("/v1/routes/resolve", {"to": "+33612345678"}).json()
    assert french["route"] == "default" and french["legs"][0]["provider"] == "twilio"


def test_resolve_never_uses_another_tenants_rule(api, routes):
    other_api = APIClient()
    other_api.credentials(HTTP_AUTHORIZATION=f"Bearer {tenant_with_key('third')[1]}")
    assert other_api.get("/v1/routes/resolve", {"to": GB, "priority": "bulk"}).json()["route"] == "all:gb-all"


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("/v1/routes/resolve", {}, "to"),
        ("/v1/routes/resolve", {"to": ""}, "to"),
        ("/v1/routes/resolve", {"to": "not-a-number"}, "to"),
        ("/v1/routes/resolve", {"to": "+1"}, "to"),
        ("/v1/routes/resolve", {"to": GB, "priority": "urgent"}, "priority"),
        ("/v1/routes/resolve", {"to": GB, "country": "GB"}, "country"),
        ("/v1/routes", {"page_size": "5"}, "page_size"),
    ],
)
def test_bad_input_is_a_400_naming_the_parameter(api, path, params, field):
    response = api.get(path, params)
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"], response.json()


def test_routes_need_an_api_key(db):
    assert APIClient().get("/v1/routes").status_code == 401
    assert APIClient().get("/v1/routes/resolve", {"to": GB}).status_code == 401


def test_routes_are_read_only(api):
    assert api.post("/v1/routes", {}, format="json").status_code == 405
    assert api.delete("/v1/routes").status_code == 405


def test_a_message_born_through_the_api_takes_the_admin_rule_resolve_named(api, routes):
    api.tenant.allowed_countries = ["US", "GB"]  # the destination guard allows the tenant's own country only
    api.tenant.save(update_fields=["allowed_countries"])
    resolved = api.get("/v1/routes/resolve", {"to": GB, "priority": "bulk"}).json()
    sent = api.post("/v1/messages", {"to": GB, "body": "hi", "priority": "bulk"}, format="json")
    assert sent.status_code == 201, sent.json()
    route = api.get(f"/v1/messages/{sent.json()['id']}").json()["route"]
    assert route["name"] == resolved["route"] == "tenant:gb-bulk"
    assert [leg["provider"] for leg in route["legs"]] == ["vonage", "twilio"]  # the standby never first
