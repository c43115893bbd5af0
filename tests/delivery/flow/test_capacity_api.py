"""The tenant's capacity API: its senders' rates (configured or the default for their type), setting and
removing a sender's rate, and what it may not change."""

from __future__ import annotations

import pytest

from delivery.flow import capacity, circuit
from delivery.models import SenderCapacity
from delivery.providers import get_adapter
from tests.factories import tenant_with_key

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
        "effective_segments_per_second": 1.0,
    }
    resp = api.put(
        f"/v1/capacity/senders/{api.tenant.default_from}", {"segments_per_second": 25}, format="json"
    )
    assert resp.status_code == 200
    [sender] = resp.json()["senders"]
    assert (sender["segments_per_second"], sender["source"]) == (25.0, "configured")
    assert SenderCapacity.objects.get().tenant_id == api.tenant.pk
    # another sender of this tenant (a short code it also uses)
    api.put("/v1/capacity/senders/12345", {"segments_per_second": 50}, format="json")
    assert {s["sender"] for s in api.get("/v1/capacity").json()["senders"]} == {
        api.tenant.default_from,
        "12345",
    }
    resp = api.delete(f"/v1/capacity/senders/{api.tenant.default_from}")
    assert resp.status_code == 200
    assert next(s for s in resp.json()["senders"] if s["type"] == "long_code")["source"] == "default"


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


def test_a_rate_set_by_the_operator_or_another_tenant_is_not_this_tenants(api, defaults):
    adapter = get_adapter()
    SenderCapacity.objects.create(
        provider=adapter.name, account=adapter.account, sender="+14155550111", segments_per_second=7
    )
    other, _ = tenant_with_key("other")
    capacity.sender_capacity_set(tenant=other, sender="+14155550122", segments_per_second=9)
    for sender in ("+14155550111", "+14155550122"):
        assert (
            api.put(f"/v1/capacity/senders/{sender}", {"segments_per_second": 1}, format="json").status_code
            == 403
        )
        assert api.delete(f"/v1/capacity/senders/{sender}").status_code == 403
    assert sorted(SenderCapacity.objects.values_list("segments_per_second", flat=True)) == [7, 9]


def test_provider_status_shows_an_open_circuit(api, defaults, settings):
    adapter = get_adapter()
    settings.CIRCUIT_MIN_FAILURES = 1
    circuit.circuit_report(provider=adapter.name, account=adapter.account, ok=0, failed=3, error="503")
    status = api.get("/v1/capacity").json()["provider_status"]
    assert status["circuit"] == "open" and status["since"] and status["next_probe_at"]
