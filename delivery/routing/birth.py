"""Routing at birth: every message, however it is born (the API, a schedule's occurrence, a campaign
row), gets its route here, before it is inserted (scheduling.messages.birth calls ``rows_route``).

A row that no rule matches keeps what it had: the default provider and its own sender, route "" and no
plan (nothing to fail over to). A matched rule sets the first leg's provider and sender on the row and
stores the plan, every leg made concrete (``{provider, account, from, pool}``: a leg without a sender
takes the message's own), so a failover later needs nothing but the row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings

from delivery.routing.rules import Leg, Plan, plan_with, rules_for
from smsgw.config import providers as declarations
from smsgw.tenancy.senders import tenant_senders


def concrete(leg: Leg, own_from: str, own_pool: str) -> dict[str, str] | None:
    """The leg as the message will use it: its sender as a From or a sender pool (the provider's pool
    pattern decides), or the message's own sender. None when the provider cannot use that sender (a
    sender pool the provider has no such thing for)."""
    pools = declarations.capabilities(leg.provider).sender_pools
    if leg.sender:
        is_pool = pools is not None and pools.matches(leg.sender)
        sender_from, pool = ("", leg.sender) if is_pool else (leg.sender, "")
    else:
        sender_from, pool = own_from, own_pool
        if pool and (pools is None or not pools.matches(pool)):
            return None
    return {"provider": leg.provider, "account": leg.account, "from": sender_from, "pool": pool}


def fields_for(
    plan: Plan,
    own_from: str,
    own_pool: str,
    owned: Callable[[Leg, dict[str, str]], bool] = lambda leg, made: True,
) -> dict[str, Any] | None:
    """The route fields of a plan: its legs made concrete, less those the provider cannot use and those
    whose sender the tenant may not use there (``owned``); None when no leg is left."""
    legs = [c for leg in plan.legs if (c := concrete(leg, own_from, own_pool)) is not None and owned(leg, c)]
    if not legs:
        return None
    first = legs[0]
    return {
        "provider": first["provider"],
        "from_number": first["from"],
        "sender_pool": first["pool"],
        "route": plan.route,
        "route_plan": legs,
        "route_leg": 0,
    }


def _leg_owned(tenant_id: int, senders_cache: dict[int, list]) -> Callable[[Leg, dict[str, str]], bool]:
    """Whether the tenant may send from a leg's sender there (smsgw.tenancy.senders). A leg's fixed sender
    must be one of the tenant's, valid on the leg's provider and account: a rule for all tenants (or
    SMSGW_ROUTES) naming one tenant's number must not let the others send as it, so such a leg is skipped
    for them. The message's own sender was checked when it was accepted; its leg is skipped only where
    the tenant's sender is restricted to other providers or accounts."""
    senders = senders_cache.get(tenant_id)
    if senders is None:
        senders = senders_cache[tenant_id] = tenant_senders(tenant_id)

    def owned(leg: Leg, made: dict[str, str]) -> bool:
        value = made["pool"] or made["from"]
        rows = [(p, a) for v, p, a, _ in senders if v == value]
        if not leg.sender and not rows:
            return True  # the default of a tenant made before senders had owners, or outside the service
        return any(p in ("", made["provider"]) and a in ("", made["account"]) for p, a in rows)

    return owned


def _routed(
    row: Any, rules_cache: dict[int | None, list], senders_cache: dict[int, list]
) -> dict[str, Any] | None:
    """The route fields of one row (a ``Message`` or a dict of its field values), or None when no rule
    matches it (or none of its legs has a sender the tenant owns)."""
    get = row.get if isinstance(row, dict) else (lambda name, default=None: getattr(row, name, default))
    tenant_id = get("tenant_id")
    rules = rules_cache.get(tenant_id)
    if rules is None:
        rules = rules_cache[tenant_id] = rules_for(tenant_id)
    if not rules:
        return None
    plan = plan_with(rules, get("to") or "", get("priority") or "transactional", get("public_id") or "")
    if plan.route == "default":
        return None
    owned = _leg_owned(tenant_id or 0, senders_cache)  # a message always has its tenant
    return fields_for(plan, get("from_number") or "", get("sender_pool") or "", owned)


def _unrouted(row: dict) -> dict[str, Any]:
    return {
        "provider": row.get("provider") or settings.SMSGW_PROVIDER,
        "from_number": row.get("from_number") or "",
        "sender_pool": row.get("sender_pool") or "",
        "route": "",
        "route_plan": [],
        "route_leg": 0,
    }


def rows_route(rows: Sequence[tuple[Any, Any]]) -> None:
    """Route each row in place. A batch no rule touches is left as it is (the fields' defaults: the
    default provider, no route), at the cost of one rules look-up per tenant; once one dict row is
    routed, every dict row gets the same keys (a batch insert takes its columns from the first row)."""
    rules_cache: dict[int | None, list] = {}
    senders_cache: dict[int, list] = {}
    routed = [
        (row, values) for row, _ in rows if (values := _routed(row, rules_cache, senders_cache)) is not None
    ]
    if not routed:
        return
    for row, values in routed:
        if isinstance(row, dict):
            row.update(values)
        else:
            for name, value in values.items():
                setattr(row, name, value)
    done = {id(row) for row, _ in routed}
    for row, _ in rows:
        if isinstance(row, dict) and id(row) not in done:
            row.update(_unrouted(row))
