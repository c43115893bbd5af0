"""Which route a message gets: a tenant's own rules before those for all tenants, both before the settings'
``SMSGW_ROUTES``, the default provider last; matching by country, prefix and priority class; the weighted
draw of the first leg; and the per-process rule cache, read again at once after this process saves."""

from __future__ import annotations

from collections import Counter

import pytest

from delivery.routing import rules
from delivery.routing.models import RouteLeg, RouteRule
from delivery.routing.rules import Leg, Rule, order_legs, plan, tenant_rules
from smsgw.config.routes import LegSpec, parse
from tests.delivery.routing.helpers import route_rule
from tests.factories import tenant_with_key

pytestmark = pytest.mark.django_db

US = "+14155550123"
GB = "+447700900123"
GB_MOBILE_PREFIX = "+4477"


@pytest.fixture
def tenant():
    return tenant_with_key("acme")[0]


@pytest.fixture
def settings_routes(settings):
    raw = """[{"name": "gb", "country": "GB", "legs": [{"provider": "vonage", "sender": "ACME"}]},
              {"name": "bulk", "priority": "bulk", "legs": [{"provider": "vonage"}]}]"""
    settings.SMSGW_ROUTES = parse(raw, ["twilio", "vonage"], ["transactional", "bulk"])
    settings.SMSGW_PROVIDER = "twilio"
    return settings


def test_precedence_tenant_then_all_tenants_then_settings_then_default(tenant, settings_routes):
    other = tenant_with_key("other")[0]
    assert plan(tenant.pk, GB, "transactional", seed="m1").route == "settings:gb"
    assert plan(tenant.pk, US, "transactional", seed="m1") == rules.Plan("default", (Leg("twilio"),))

    route_rule(None, "gb-all", [("twilio", "", "+14155550100", 1)], country="GB")
    assert plan(tenant.pk, GB, "transactional", seed="m1").route == "all:gb-all"

    route_rule(tenant, "gb-own", [("vonage", "", "ACME", 1)], country="GB")
    own = plan(tenant.pk, GB, "transactional", seed="m1")
    assert own == rules.Plan("tenant:gb-own", (Leg("vonage", "", "ACME"),))
    # Another tenant's rule is never this tenant's; the rule for all tenants still is.
    assert plan(other.pk, GB, "transactional", seed="m1").route == "all:gb-all"
    # No tenant (an internal message): only the rules for all tenants and the settings'.
    assert plan(None, GB, "transactional", seed="m1").route == "all:gb-all"


def test_position_orders_rules_within_a_source_and_disabled_rules_are_skipped(tenant, settings_routes):
    route_rule(tenant, "second", [("vonage", "", "", 1)], position=2)
    route_rule(tenant, "first", [("twilio", "", "", 1)], position=1, prefix="+1")
    route_rule(tenant, "off", [("twilio", "", "", 1)], position=0, enabled=False)
    assert [r.label for r in tenant_rules(tenant.pk)] == ["tenant:first", "tenant:second"]
    assert plan(tenant.pk, US, "bulk", seed="m").route == "tenant:first"
    assert plan(tenant.pk, GB, "bulk", seed="m").route == "tenant:second"


@pytest.mark.parametrize(
    ("to", "priority", "route"),
    [
        (GB, "transactional", "tenant:gb"),  # country GB, prefix +4477, but not bulk: the next rule
        (GB, "bulk", "tenant:gb-mobile-bulk"),
        ("+442079460000", "bulk", "tenant:gb"),  # a GB landline: the prefix does not match
        (US, "bulk", "settings:bulk"),
        (US, "transactional", "default"),
        ("+33612345678", "transactional", "default"),
    ],
)
def test_country_prefix_and_priority_matching(tenant, settings_routes, to, priority, route):
    route_rule(
        tenant,
        "gb-mobile-bulk",
        [("vonage", "", "ACME", 1)],
        position=0,
        country="GB",
        prefix=GB_MOBILE_PREFIX,
        priority="bulk",
    )
    route_rule(tenant, "gb", [("vonage", "", "", 1)], position=1, country="GB")
    assert plan(tenant.pk, to, priority, seed="m").route == route


def test_a_rule_matches_only_its_priority_country_and_prefix():
    rule = Rule("x", (LegSpec("twilio"),), country="GB", prefix="+4477", priority="bulk")
    assert rule.matches(GB, "GB", "bulk")
    assert not rule.matches(GB, "GB", "transactional")
    assert not rule.matches("+442079460000", "GB", "bulk")
    assert not rule.matches("+447797123456", "JE", "bulk")  # Jersey shares +44 77: the country decides too
    assert Rule("any", (LegSpec("twilio"),)).matches(US, "US", "transactional")


# --- weights --------------------------------------------------------------------------------------------

LEGS = (LegSpec("twilio", weight=3), LegSpec("vonage", weight=1), LegSpec("twilio", sender="S", weight=0))


def test_the_draw_is_stable_for_a_seed_and_the_rest_follow_in_list_order():
    first = order_legs(LEGS, "msg_abc")
    assert all(order_legs(LEGS, "msg_abc") == first for _ in range(20))
    # The legs not drawn keep their listed order after the first.
    listed = [Leg(s.provider, s.account, s.sender) for s in LEGS]
    assert list(first[1:]) == [leg for leg in listed if leg != first[0]]


def test_a_standby_leg_is_never_first_and_the_draw_is_proportional():
    firsts = Counter(order_legs(LEGS, f"msg_{i}")[0].provider for i in range(8000))
    assert set(firsts) == {"twilio", "vonage"}  # never the standby (twilio, sender S: weight 0)
    assert all(order_legs(LEGS, f"m{i}")[0].sender != "S" for i in range(2000))
    share = firsts["twilio"] / 8000
    assert 0.72 < share < 0.78, share  # 3 : 1


def test_one_weighted_leg_is_always_first_whatever_its_position():
    legs = (LegSpec("vonage", weight=0), LegSpec("twilio", weight=5))
    assert {order_legs(legs, f"m{i}")[0].provider for i in range(200)} == {"twilio"}
    assert order_legs(legs, "m")[1].provider == "vonage"


def test_weights_from_the_admin_reach_the_plan(tenant, settings_routes):
    route_rule(tenant, "split", [("twilio", "", "", 1), ("vonage", "", "ACME", 1), ("twilio", "", "X1", 0)])
    firsts = Counter(plan(tenant.pk, US, "bulk", seed=f"m{i}").legs[0].provider for i in range(2000))
    assert 0.44 < firsts["twilio"] / 2000 < 0.56
    assert all(plan(tenant.pk, US, "bulk", seed=f"m{i}").legs[0].sender != "X1" for i in range(500))
    assert len(plan(tenant.pk, US, "bulk", seed="m").legs) == 3


# --- the cache ------------------------------------------------------------------------------------------


def test_rules_are_read_once_per_ttl_and_again_at_once_after_a_save(
    tenant, settings, django_assert_num_queries
):
    settings.ROUTES_CACHE_SECONDS = 3600
    rule = route_rule(tenant, "gb", [("vonage", "", "", 1)], country="GB")
    with django_assert_num_queries(2):  # the rules, their legs: every tenant's at once
        assert [r.label for r in tenant_rules(tenant.pk)] == ["tenant:gb"]
    with django_assert_num_queries(0):
        for _ in range(100):
            tenant_rules(tenant.pk)
            tenant_rules(None)

    # A write that saves no model (another process, say) is seen only when the snapshot expires...
    RouteRule.objects.filter(pk=rule.pk).update(country="FR")
    assert tenant_rules(tenant.pk)[0].country == "GB"
    # ...a save in this process at once: the rule itself, or one of its legs.
    rule.refresh_from_db()
    rule.save()
    assert tenant_rules(tenant.pk)[0].country == "FR"
    RouteLeg.objects.create(rule=rule, position=5, provider="twilio", weight=0)
    assert [leg.provider for leg in tenant_rules(tenant.pk)[0].legs] == ["vonage", "twilio"]
    RouteLeg.objects.filter(rule=rule, provider="twilio").get().delete()
    assert [leg.provider for leg in tenant_rules(tenant.pk)[0].legs] == ["vonage"]
    rule.delete()
    assert tenant_rules(tenant.pk) == []


def test_the_snapshot_expires_after_the_ttl(tenant, settings):
    settings.ROUTES_CACHE_SECONDS = 0.0
    rule = route_rule(tenant, "gb", [("vonage", "", "", 1)], country="GB")
    assert tenant_rules(tenant.pk)[0].country == "GB"
    RouteRule.objects.filter(pk=rule.pk).update(enabled=False)
    assert tenant_rules(tenant.pk) == []
