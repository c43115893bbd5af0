"""Routing rules as the admin saves them, for the routing tests."""

from __future__ import annotations

from delivery.routing.models import RouteLeg, RouteRule


def route_rule(
    tenant, name: str, legs=(("twilio", "", "", 1),), *, position: int = 0, enabled: bool = True, **match
) -> RouteRule:
    """A rule (``tenant`` None: for all tenants) with its legs, (provider, account, sender, weight)."""
    rule = RouteRule.objects.create(tenant=tenant, name=name, position=position, enabled=enabled, **match)
    for i, (provider, account, sender, weight) in enumerate(legs):
        RouteLeg.objects.create(
            rule=rule, position=i, provider=provider, account=account, sender=sender, weight=weight
        )
    return rule
