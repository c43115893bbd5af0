"""A rule is checked before it is saved, each problem naming the field to correct: the settings' checks
(registered provider, weights, a leg of weight above 0, no leg twice), and what only a running process
can tell (the provider's timeout inside a sending lease, its configured account, a sender it can take)."""

from __future__ import annotations

import pytest

from delivery.providers import get_adapter
from delivery.routing.service import RouteConfigError, route_leg_check, route_rule_check


@pytest.fixture(autouse=True)
def _fresh_adapters():
    get_adapter.cache_clear()
    yield
    get_adapter.cache_clear()


def fails(field: str, **rule) -> str:
    rule.setdefault("name", "r")
    rule.setdefault("legs", [{"provider": "twilio"}])
    with pytest.raises(RouteConfigError) as caught:
        route_rule_check(**rule)
    assert caught.value.field == field, caught.value
    return caught.value.message


def test_a_good_rule_comes_back_as_it_will_be_saved():
    spec = route_rule_check(
        name=" gb ",
        country="gb",
        prefix="+44",
        priority="bulk",
        legs=[
            {"provider": "vonage", "sender": "ACME", "weight": 3},
            {"provider": "twilio", "sender": "+1 415 555 0100", "weight": 0},
            {"provider": "twilio", "account": get_adapter("twilio").account},
        ],
    )
    assert (spec.name, spec.country, spec.prefix, spec.priority) == ("gb", "GB", "+44", "bulk")
    assert [(leg.provider, leg.sender, leg.weight) for leg in spec.legs] == [
        ("vonage", "ACME", 3),
        ("twilio", "+14155550100", 0),
        ("twilio", "", 1),
    ]


def test_match_fields_are_named():
    assert fails("name", name="  ") == "required"
    assert "48" in fails("name", name="x" * 49)
    assert "alpha-2" in fails("country", country="GBR")
    assert "E.164" in fails("prefix", prefix="44")
    assert "transactional" in fails("priority", priority="urgent")


def test_leg_fields_are_named_by_position():
    assert "must be one of" in fails("legs[1].provider", legs=[{"provider": "twilio"}, {"provider": "nope"}])
    assert "0 to 1000" in fails("legs[0].weight", legs=[{"provider": "twilio", "weight": 1001}])
    assert "0 to 1000" in fails("legs[0].weight", legs=[{"provider": "twilio", "weight": -1}])
    assert "above 0" in fails("legs", legs=[{"provider": "twilio", "weight": 0}])
    assert "at least one" in fails("legs", legs=[])
    assert "twice" in fails(
        "legs[1]", legs=[{"provider": "vonage", "sender": "ACME"}, {"provider": "vonage", "sender": "ACME"}]
    )


def test_an_account_other_than_the_configured_one_is_refused_without_echoing_it():
    configured = get_adapter("twilio").account
    message = fails("legs[0].account", legs=[{"provider": "twilio", "account": "AC" + "9" * 32}])
    assert configured not in message
    assert route_leg_check(provider="twilio", account=configured).account == configured


def test_a_sender_the_provider_cannot_take_is_refused():
    # A sender-pool id where the provider declares none (the other provider's messaging service).
    pool = "MG" + "0" * 32
    assert "no sender pools" in fails("legs[0].sender", legs=[{"provider": "vonage", "sender": pool}])
    assert route_leg_check(provider="twilio", sender=pool).sender == pool
    assert "E.164" in fails("legs[0].sender", legs=[{"provider": "vonage", "sender": "not a sender!"}])
    assert fails("legs[0].sender", legs=[{"provider": "twilio", "sender": "+1 415"}])
    assert route_leg_check(provider="vonage", sender="12345").sender == "12345"  # a short code


def test_a_provider_slower_than_the_sending_lease_is_refused(settings):
    settings.SENDING_LEASE_SECONDS = 8
    settings.TWILIO_TIMEOUT_SECONDS = 10.0
    message = fails("legs[0].provider", legs=[{"provider": "twilio"}])
    assert "TWILIO_TIMEOUT_SECONDS" in message and "SMSGW_SENDING_LEASE_SECONDS (8 s)" in message
    settings.TWILIO_TIMEOUT_SECONDS = 5.0
    assert route_leg_check(provider="twilio").provider == "twilio"


def test_in_production_a_leg_to_a_provider_missing_its_signature_secret_is_refused(settings, monkeypatch):
    """What start-up requires of the providers SMSGW_ROUTES reaches, a route edited in the admin needs too:
    a route must not make a provider reachable whose receipts and STOPs cannot be verified."""
    from smsgw.config import providers as declarations

    real = declarations.provider_settings

    def declared(name: str):
        found = real(name)
        if name != "vonage" or found is None:
            return found
        return declarations.ProviderSettings(
            values=found.values, problem="VONAGE_SIGNATURE_SECRET must be set"
        )

    monkeypatch.setattr(declarations, "provider_settings", declared)
    settings.PRODUCTION = False
    assert route_leg_check(provider="vonage", sender="ACME").provider == "vonage"  # only production refuses
    settings.PRODUCTION = True
    assert "VONAGE_SIGNATURE_SECRET" in fails(
        "legs[1].provider", legs=[{"provider": "twilio"}, {"provider": "vonage"}]
    )
    assert route_leg_check(provider="twilio").provider == "twilio"
