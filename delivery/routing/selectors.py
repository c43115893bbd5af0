"""Reading a tenant's routes as the API shows them: every rule that applies to it in the order they are
tried, and the route a message to a number would get now. Read from the database (not the per-process
snapshot that messages use, delivery.routing.rules.tenant_rules): an operator who just saved a rule sees
it at once, where a message born in another process may take ``ROUTES_CACHE_SECONDS`` to."""

from __future__ import annotations

from dataclasses import dataclass, replace

from django.conf import settings

from delivery.routing.rules import DEFAULT_ROUTE, Rule, country_of, plan_with, rules_load, settings_rules
from smsgw.config.routes import LegSpec
from smsgw.tenancy.senders import tenant_senders


@dataclass(frozen=True)
class Resolution:
    route: str  # the rule's label, or "default"
    legs: tuple[LegSpec, ...]  # as listed (the first tried is drawn among those of weight > 0)
    country: str  # of the destination, "" when unknown


def _rules(tenant_id: int) -> list[Rule]:
    by_tenant = rules_load(tenant_id, every_tenant=False)
    return [*by_tenant.get(tenant_id, ()), *by_tenant.get(None, ()), *settings_rules()]


def routes_list(tenant_id: int) -> list[Rule]:
    """The tenant's own enabled rules, those for all tenants, then the settings' ``SMSGW_ROUTES``. A leg
    with a fixed sender the tenant does not own is left out, as a message's plan leaves it out
    (delivery.routing.birth): another tenant's sender is neither used nor shown."""
    senders = tenant_senders(tenant_id)
    return [_own_legs(rule, senders) for rule in _rules(tenant_id)]


def _own_legs(rule: Rule, senders: list[tuple[str, str, str, bool]]) -> Rule:
    return replace(rule, legs=tuple(leg for leg in rule.legs if _usable(leg, senders)))


def _usable(leg: LegSpec, senders: list[tuple[str, str, str, bool]]) -> bool:
    if not leg.sender:
        return True  # the message's own sender, checked when the message is accepted
    return any(
        v == leg.sender and p in ("", leg.provider) and a in ("", leg.account) for v, p, a, _ in senders
    )


def default_legs() -> tuple[LegSpec, ...]:
    """No rule matching: the default provider, its account, the message's own sender."""
    return (LegSpec(settings.SMSGW_PROVIDER),)


def route_resolve(tenant_id: int, *, to: str, priority: str) -> Resolution:
    """The route a message of this tenant to ``to`` (E.164) of this priority class would get now. Matched
    by the resolver itself (``plan_with``), so it can never disagree with a message's plan."""
    rules = _rules(tenant_id)
    route = plan_with(rules, to, priority, seed="").route
    rule = next((r for r in rules if r.label == route), None)
    if rule is not None:
        rule = _own_legs(rule, tenant_senders(tenant_id))
    if rule is None or not rule.legs:  # no leg left for this tenant: as its messages, the default
        return Resolution(DEFAULT_ROUTE, default_legs(), country_of(to))
    return Resolution(rule.label, rule.legs, country_of(to))
