"""A message's route: the first rule that matches its destination and priority gives an ordered list of
legs, (provider, account, sender), that the message is sent through in turn.

Rules are tried in this order: the tenant's own, those for all tenants (both edited in the admin), then
the settings' ``SMSGW_ROUTES`` (smsgw.config.routes). No rule matching, the message goes through
``SMSGW_PROVIDER`` with its own sender (route ``default``), as before routing existed.

The plan is computed once, when the message is born, and stored on it (``route``, ``route_plan``): a rule
edited later changes new messages, never the order an in-flight message fails over in.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import phonenumbers
from django.conf import settings

from smsgw.config.routes import LegSpec, RuleSpec

DEFAULT_ROUTE = "default"


@dataclass(frozen=True)
class Leg:
    """One way out: a provider, one of its accounts ("" = the configured one) and a sender ("" = the
    message's own: its From or sender pool)."""

    provider: str
    account: str = ""
    sender: str = ""

    def as_json(self) -> dict[str, str]:
        return {"provider": self.provider, "account": self.account, "sender": self.sender}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Leg:
        return cls(str(raw.get("provider", "")), str(raw.get("account", "")), str(raw.get("sender", "")))


@dataclass(frozen=True)
class Plan:
    route: str  # "<source>:<rule name>" (tenant / all / settings), or "default"
    legs: tuple[Leg, ...]  # in the order they are tried

    def as_json(self) -> list[dict[str, str]]:
        return [leg.as_json() for leg in self.legs]


@dataclass(frozen=True)
class Rule:
    """A rule from any source, as the resolver uses it."""

    label: str
    legs: tuple[LegSpec, ...]
    country: str = ""
    prefix: str = ""
    priority: str = ""

    def matches(self, to: str, country: str, priority: str) -> bool:
        if self.priority and self.priority != priority:
            return False
        if self.prefix and not to.startswith(self.prefix):
            return False
        return not (self.country and self.country != country)


def country_of(to: str) -> str:
    """ISO 3166 alpha-2 of an E.164 number ("" when unknown)."""
    try:
        parsed = phonenumbers.parse(to, None)
    except phonenumbers.NumberParseException:
        return ""
    # A number in a range phonenumbers does not know as assigned (a reserved drama or test range) has no
    # region of its own: the main country of its calling code (44 -> GB, 1 -> US) stands in.
    region = phonenumbers.region_code_for_number(parsed) or phonenumbers.region_code_for_country_code(
        parsed.country_code or 0
    )
    return "" if region in (None, "ZZ", "001") else region


def settings_rules(specs: Iterable[RuleSpec] | None = None) -> list[Rule]:
    specs = settings.SMSGW_ROUTES if specs is None else specs
    return [Rule(f"settings:{s.name}", s.legs, s.country, s.prefix, s.priority) for s in specs]


def tenant_rules(tenant_id: int | None) -> list[Rule]:
    """The admin-edited rules that apply to a tenant: its own, then those for all tenants (enabled ones,
    each group by position). Asked for every message born (a campaign makes up to a million), so read
    from a per-process snapshot of every enabled rule: two queries per ``ROUTES_CACHE_SECONDS``, and at
    once after this process saved or deleted a rule or a leg (``routes_cache_clear``). Another process
    sees an edit within that many seconds."""
    by_tenant = _snapshot()
    own = by_tenant.get(tenant_id, ()) if tenant_id is not None else ()
    return [*own, *by_tenant.get(None, ())]


# (expires at, on time.monotonic(); rules by tenant id, None = for all tenants). Replaced whole, never
# mutated, so a reader in another thread sees one snapshot or the next.
_cache: tuple[float, dict[int | None, tuple[Rule, ...]]] = (0.0, {})


def _snapshot() -> dict[int | None, tuple[Rule, ...]]:
    global _cache
    expires, by_tenant = _cache
    now = time.monotonic()
    if now < expires:
        return by_tenant
    by_tenant = rules_load()
    _cache = (now + settings.ROUTES_CACHE_SECONDS, by_tenant)
    return by_tenant


def routes_cache_clear() -> None:
    """Forget this process's snapshot (a rule or leg was saved or deleted here)."""
    global _cache
    _cache = (0.0, {})


def rules_load(
    tenant_id: int | None = None, *, every_tenant: bool = True
) -> dict[int | None, tuple[Rule, ...]]:
    """The enabled admin-edited rules, by tenant id (None: for all tenants), each group in the order they
    are tried. ``every_tenant`` False: only ``tenant_id``'s and those for all tenants (the API)."""
    # Imported here, not above: resolving a plan needs no model, and this module stays importable early.
    from django.db.models import Prefetch, Q

    from delivery.routing.models import RouteLeg, RouteRule

    rows = RouteRule.objects.filter(enabled=True)
    if not every_tenant:
        rows = rows.filter(Q(tenant_id=tenant_id) | Q(tenant__isnull=True))
    rows = rows.order_by("position", "id").prefetch_related(
        Prefetch("legs", queryset=RouteLeg.objects.order_by("position", "id"))
    )
    grouped: dict[int | None, list[Rule]] = {}
    for row in rows:
        legs = tuple(LegSpec(leg.provider, leg.account, leg.sender, leg.weight) for leg in row.legs.all())
        if not legs:
            continue  # a rule saved without legs (outside the admin) routes nothing: the next one is tried
        source = "all" if row.tenant_id is None else "tenant"
        rule = Rule(f"{source}:{row.name}", legs, row.country, row.prefix, row.priority)
        grouped.setdefault(row.tenant_id, []).append(rule)
    return {key: tuple(rules) for key, rules in grouped.items()}


def rules_for(tenant_id: int | None) -> list[Rule]:
    return [*tenant_rules(tenant_id), *settings_rules()]


def order_legs(legs: Sequence[LegSpec], seed: str) -> tuple[Leg, ...]:
    """The first leg drawn among those of weight > 0, in proportion to their weights (a stable draw: the
    same seed always gives the same leg), then the others in their listed order."""
    weighted = [(i, leg) for i, leg in enumerate(legs) if leg.weight > 0]
    total = sum(leg.weight for _, leg in weighted)
    first = weighted[0][0] if weighted else 0
    if len(weighted) > 1 and total > 0:
        point = int.from_bytes(hashlib.blake2b(seed.encode(), digest_size=8).digest(), "big") % total
        for i, leg in weighted:
            if point < leg.weight:
                first = i
                break
            point -= leg.weight
    ordered = [legs[first], *(leg for i, leg in enumerate(legs) if i != first)]
    return tuple(Leg(leg.provider, leg.account, leg.sender) for leg in ordered)


def plan_with(rules: Sequence[Rule], to: str, priority: str, seed: str) -> Plan:
    country = country_of(to) if any(rule.country for rule in rules) else ""
    for rule in rules:
        if rule.matches(to, country, priority):
            return Plan(rule.label, order_legs(rule.legs, seed))
    return Plan(DEFAULT_ROUTE, (Leg(settings.SMSGW_PROVIDER),))


def plan(tenant_id: int | None, to: str, priority: str, *, seed: str) -> Plan:
    """The route of a message to ``to`` of this priority class; ``seed`` (its public id) makes the
    weighted draw stable."""
    return plan_with(rules_for(tenant_id), to, priority, seed)
