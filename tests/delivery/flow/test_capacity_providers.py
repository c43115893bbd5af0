"""`/v1/capacity` for every provider a tenant sends through: a sender on a routed provider (here a second
provider, reached by the tenant's own route) is listed under it and can be capped there, with `provider` to
say which when a sender is on more than one; without it the API does what it did before routing."""

from __future__ import annotations

import pytest

from delivery.flow import capacity
from delivery.models import SenderCapacity
from delivery.providers import get_adapter
from tests.delivery.routing.helpers import route_rule
from tests.factories import sender_for

pytestmark = pytest.mark.django_db

DEFAULT, ROUTED = "twilio", "vonage"


@pytest.fixture
def routed(api, settings):
    """The tenant's GB messages go out through the second provider from its own sender ACME."""
    settings.SMSGW_PROVIDER = DEFAULT
    settings.SENDER_RATE_DEFAULTS = {**settings.SENDER_RATE_DEFAULTS, "alphanumeric": 10.0, "long_code": 1.0}
    capacity.cache_clear()
    sender_for(api.tenant, "ACME", provider=ROUTED)
    route_rule(api.tenant, "gb", [(ROUTED, "", "ACME", 1), (DEFAULT, "", "", 0)], country="GB")
    return api


def by_provider(body) -> dict[str, dict]:
    return {p["provider"]: p for p in body["providers"]}


def rates(entry) -> dict[str, tuple[float, str]]:
    return {s["sender"]: (s["segments_per_second"], s["source"]) for s in entry["senders"]}


def test_get_lists_every_provider_the_tenants_routes_use_with_their_senders(routed):
    body = routed.get("/v1/capacity").json()
    assert [p["provider"] for p in body["providers"]] == [DEFAULT, ROUTED]  # the default first
    providers = by_provider(body)
    assert providers[DEFAULT]["default"] is True and providers[ROUTED]["default"] is False
    assert providers[ROUTED]["account"] == ""  # the provider's configured account, never echoed
    assert providers[ROUTED]["provider_status"]["circuit"] == "closed"
    assert rates(providers[ROUTED]) == {"ACME": (10.0, "default")}
    assert set(rates(providers[DEFAULT])) == {routed.tenant.default_from}
    # Unchanged for the clients that read the default provider's fields.
    assert body["provider"] == DEFAULT and body["senders"] == providers[DEFAULT]["senders"]


def test_a_routed_sender_is_capped_on_its_own_provider(routed):
    resp = routed.put("/v1/capacity/senders/ACME", {"segments_per_second": 2}, format="json")
    assert resp.status_code == 200, resp.content
    assert rates(by_provider(resp.json())[ROUTED]) == {"ACME": (2.0, "configured")}
    row = SenderCapacity.objects.get(tenant=routed.tenant)
    assert (row.provider, row.account, row.sender) == (ROUTED, get_adapter(ROUTED).account, "ACME")
    # What the release gate reads for that provider's account.
    capacity.cache_clear()
    assert (
        capacity.sender_rates(ROUTED, get_adapter(ROUTED).account, ["ACME"])["ACME"].segments_per_second == 2
    )

    resp = routed.delete(f"/v1/capacity/senders/ACME?provider={ROUTED}")
    assert resp.status_code == 200
    assert rates(by_provider(resp.json())[ROUTED]) == {"ACME": (10.0, "default")}
    assert not SenderCapacity.objects.exists()


def test_a_sender_on_two_providers_is_addressed_with_provider_and_defaults_to_the_default(routed):
    # A leg without a sender of its own sends from the message's: the tenant's default sender is then on
    # both providers.
    route_rule(routed.tenant, "fr", [(ROUTED, "", "", 1)], country="FR", position=1)
    sender = routed.tenant.default_from
    body = routed.get("/v1/capacity").json()
    assert all(sender in rates(p) for p in body["providers"])

    assert (
        routed.put(f"/v1/capacity/senders/{sender}", {"segments_per_second": 0.5}, format="json").status_code
        == 200
    )
    assert SenderCapacity.objects.get().provider == DEFAULT  # as before routing
    resp = routed.put(
        f"/v1/capacity/senders/{sender}?provider={ROUTED}", {"segments_per_second": 0.25}, format="json"
    )
    assert resp.status_code == 200
    providers = by_provider(resp.json())
    assert rates(providers[DEFAULT])[sender] == (0.5, "configured")
    assert rates(providers[ROUTED])[sender] == (0.25, "configured")


@pytest.mark.parametrize(
    ("query", "field"), [("?provider=nope", "provider"), ("?provider=", "provider"), ("?bogus=1", "bogus")]
)
def test_an_unknown_provider_or_parameter_is_a_400_naming_it(routed, query, field):
    resp = routed.put(f"/v1/capacity/senders/ACME{query}", {"segments_per_second": 1}, format="json")
    assert resp.status_code == 400, resp.content
    assert field in resp.json()["error"]["fields"]
    assert routed.delete(f"/v1/capacity/senders/ACME{query}").status_code == 400
    assert not SenderCapacity.objects.exists()


def test_a_provider_the_tenant_does_not_send_through_is_refused(api, settings):
    settings.SMSGW_PROVIDER = DEFAULT
    resp = api.put(
        f"/v1/capacity/senders/{api.tenant.default_from}?provider={ROUTED}",
        {"segments_per_second": 1},
        format="json",
    )
    assert resp.status_code == 400 and "provider" in resp.json()["error"]["fields"]
    assert [p["provider"] for p in api.get("/v1/capacity").json()["providers"]] == [DEFAULT]


def test_a_sender_the_tenant_does_not_own_on_that_provider_is_403(routed):
    # ACME is the tenant's on the routed provider only.
    resp = routed.put(
        f"/v1/capacity/senders/ACME?provider={DEFAULT}", {"segments_per_second": 1}, format="json"
    )
    assert resp.status_code == 403
    assert not SenderCapacity.objects.exists()
