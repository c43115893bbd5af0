"""The tenant's capacity API: its senders' rates (configured or the default for their type), setting and
removing a sender's rate, and what it may not change."""

from __future__ import annotations

import pytest

from delivery.flow import capacity, circuit
from delivery.models import SenderCapacity
from delivery.providers import get_adapter
from tests.factories import sender_for, tenant_with_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def defaults(settings):
    settings.SENDER_RATE_DEFAULTS = {
        "long_code": 1.0,
        "toll_free": 3.0,
        "short_code": 100.0,
        "alphanumeric": 10.0,
        "messaging_service": 10.0,
    }
    capacity.cache_clear()
    get_adapter.cache_clear()


@pytest.mark.parametrize(
    ("sender", "kind"),
    [
        ("+14155550100", "long_code"),
        ("+18005550100", "toll_free"),
        ("+18885550100", "toll_free"),
        ("12345", "short_code"),
        ("ACME", "alphanumeric"),
        ("MG" + "a" * 32, "messaging_service"),
    ],
)
def test_sender_types(sender, kind):
    assert capacity.sender_type(sender) == kind


def test_get_shows_defaults_then_a_configured_rate(api, defaults):
    body = api.get("/v1/capacity").json()
    assert body["provider"] == "twilio" and body["provider_status"]["circuit"] == "closed"
    [sender] = body["senders"]
    assert sender == {
        "sender": api.tenant.default_from,
        "type": "long_code",
        "segments_per_second": 1.0,
        "source": "default",
        "ceiling_segments_per_second": 1.0,
        "effective_segments_per_second": 1.0,
    }
    resp = api.put(
        f"/v1/capacity/senders/{api.tenant.default_from}", {"segments_per_second": 0.5}, format="json"
    )
    assert resp.status_code == 200
    [sender] = resp.json()["senders"]
    assert (sender["segments_per_second"], sender["source"]) == (0.5, "configured")
    assert SenderCapacity.objects.get().tenant_id == api.tenant.pk
    # another sender the operator assigned to this tenant (a short code): listed, and cappable
    sender_for(api.tenant, "12345")
    assert (
        api.put("/v1/capacity/senders/12345", {"segments_per_second": 50}, format="json").status_code == 200
    )
    assert {s["sender"] for s in api.get("/v1/capacity").json()["senders"]} == {
        api.tenant.default_from,
        "12345",
    }
    resp = api.delete(f"/v1/capacity/senders/{api.tenant.default_from}")
    assert resp.status_code == 200
    assert next(s for s in resp.json()["senders"] if s["type"] == "long_code")["source"] == "default"


def test_a_tenant_cap_is_never_above_the_operators_rate(api, defaults):
    adapter = get_adapter()
    sender = api.tenant.default_from
    resp = api.put(f"/v1/capacity/senders/{sender}", {"segments_per_second": 25}, format="json")
    assert resp.status_code == 400 and "segments_per_second" in resp.json()["error"]["fields"]
    assert not SenderCapacity.objects.exists()
    # the operator raises the sender's rate: the tenant may cap it anywhere below, and its cap applies
    SenderCapacity.objects.create(
        provider=adapter.name, account=adapter.account, sender=sender, segments_per_second=30
    )
    assert (
        api.put(f"/v1/capacity/senders/{sender}", {"segments_per_second": 25}, format="json").status_code
        == 200
    )
    capacity.cache_clear()
    assert capacity.sender_rates(adapter.name, adapter.account, [sender])[sender].segments_per_second == 25
    [view] = api.get("/v1/capacity").json()["senders"]
    assert (view["segments_per_second"], view["ceiling_segments_per_second"]) == (25, 30)
    # removing the cap leaves the operator's row as it was
    assert api.delete(f"/v1/capacity/senders/{sender}").status_code == 200
    assert list(SenderCapacity.objects.values_list("tenant_id", "segments_per_second")) == [(None, 30)]


@pytest.mark.parametrize(
    ("sender", "payload", "field"),
    [
        ("not a sender!", {"segments_per_second": 5}, "sender"),
        ("+14155550100", {"segments_per_second": 0}, "segments_per_second"),
        ("+14155550100", {"segments_per_second": "fast"}, "segments_per_second"),
        ("+14155550100", {"segments_per_second": 10_001}, "segments_per_second"),
        ("+14155550100", {}, "segments_per_second"),
        ("+14155550100", {"segments_per_second": 5, "burst": 9}, "burst"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(api, defaults, sender, payload, field):
    resp = api.put(f"/v1/capacity/senders/{sender}", payload, format="json")
    assert resp.status_code == 400 and field in resp.json()["error"]["fields"]
    assert not SenderCapacity.objects.exists()


def test_a_sender_the_tenant_does_not_own_is_not_its_to_pace(api, defaults):
    """The operator's sender, another tenant's sender and nobody's: 403 naming it, nothing stored."""
    adapter = get_adapter()
    SenderCapacity.objects.create(
        provider=adapter.name, account=adapter.account, sender="+14155550111", segments_per_second=7
    )
    other, _ = tenant_with_key("other", default_from="+14155550122")
    capacity.sender_capacity_set(tenant=other, sender="+14155550122", segments_per_second=0.9)
    for sender in ("+14155550111", "+14155550122", "+14155550133"):
        resp = api.put(f"/v1/capacity/senders/{sender}", {"segments_per_second": 0.001}, format="json")
        assert resp.status_code == 403 and sender in resp.json()["error"]["message"]
        assert api.delete(f"/v1/capacity/senders/{sender}").status_code == 403
    assert sorted(SenderCapacity.objects.values_list("segments_per_second", flat=True)) == [0.9, 7]


def test_provider_status_shows_an_open_circuit(api, defaults, settings):
    adapter = get_adapter()
    settings.CIRCUIT_MIN_FAILURES = 1
    circuit.circuit_report(provider=adapter.name, account=adapter.account, ok=0, failed=3, error="503")
    status = api.get("/v1/capacity").json()["provider_status"]
    assert status["circuit"] == "open" and status["since"] and status["next_probe_at"]


def test_a_cap_never_paces_another_tenant_on_a_shared_sender(api, defaults):
    """A tenant's cap is its own row, applied only while it owns the sender alone: once an operator shares
    the sender, the cap stops counting (it would pace the other tenant) and cannot be set."""
    adapter = get_adapter()
    sender = "+12025550143"
    sender_for(api.tenant, sender)
    assert (
        api.put(f"/v1/capacity/senders/{sender}", {"segments_per_second": 0.25}, format="json").status_code
        == 200
    )
    capacity.cache_clear()
    assert capacity.sender_rates(adapter.name, adapter.account, [sender])[sender].segments_per_second == 0.25
    other, _ = tenant_with_key("other", default_from="+12125550199")
    sender_for(other, sender, shared=True)
    capacity.cache_clear()
    assert capacity.sender_rates(adapter.name, adapter.account, [sender])[sender].segments_per_second == 1.0
    assert (
        api.put(f"/v1/capacity/senders/{sender}", {"segments_per_second": 0.5}, format="json").status_code
        == 403
    )
