"""The gateway-wide default routes (``SMSGW_ROUTES``), read and checked before any app code runs.

``SMSGW_ROUTES`` is a JSON list of rules, tried in order; the first whose destination and priority match
a message gives its route (delivery.routing.rules). Tenants' own rules and rules for all tenants edited in
the admin come before these; without any matching rule a message goes through ``SMSGW_PROVIDER`` with its
own sender. A rule::

    {"name": "gb-vonage",                 # shown on the message and its timeline
     "country": "GB",                     # ISO 3166 alpha-2 of the destination; or
     "prefix": "+44",                     # an E.164 prefix (either, both or neither: neither matches all)
     "priority": "transactional",         # optional: one priority class only
     "legs": [                            # the (provider, account, sender) entries, in failover order
        {"provider": "vonage", "sender": "ACME", "weight": 1},
        {"provider": "twilio", "account": "", "sender": "+15005550006", "weight": 0}]}

``weight``: the first leg tried is drawn among the legs of weight > 0 (default 1) in proportion to their
weights; the others follow in list order. A leg of weight 0 is a standby, reached only by failover.
``account`` empty: the provider's configured account. ``sender`` empty: the message's own sender.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

COUNTRY_RE = re.compile(r"[A-Z]{2}")
PREFIX_RE = re.compile(r"\+[0-9]{1,15}")
MAX_LEGS = 8


class RouteConfigError(ValueError):
    """A route that cannot be used; ``field`` names what is wrong (``legs[1].provider``)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class LegSpec:
    provider: str
    account: str = ""
    sender: str = ""
    weight: int = 1


@dataclass(frozen=True)
class RuleSpec:
    name: str
    legs: tuple[LegSpec, ...]
    country: str = ""
    prefix: str = ""
    priority: str = ""


def _text(raw: dict, key: str, where: str, max_length: int) -> str:
    value = raw.get(key, "")
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise RouteConfigError(f"{where}{key}", "must be a string")
    if len(value) > max_length:
        raise RouteConfigError(f"{where}{key}", f"at most {max_length} characters")
    return value.strip()


def leg_check(raw: object, where: str, providers: Iterable[str]) -> LegSpec:
    if not isinstance(raw, dict):
        raise RouteConfigError(where.rstrip("."), "must be an object")
    unknown = sorted(set(raw) - {"provider", "account", "sender", "weight"})
    if unknown:
        raise RouteConfigError(f"{where}{unknown[0]}", "unknown field")
    provider = _text(raw, "provider", where, 32)
    known = sorted(providers)
    if provider not in known:
        raise RouteConfigError(f"{where}provider", f"must be one of {', '.join(known)}")
    weight = raw.get("weight", 1)
    if not isinstance(weight, int) or isinstance(weight, bool) or not 0 <= weight <= 1000:
        raise RouteConfigError(f"{where}weight", "must be an integer from 0 to 1000")
    return LegSpec(provider, _text(raw, "account", where, 64), _text(raw, "sender", where, 64), weight)


def legs_check(legs: Iterable[LegSpec], where: str = "legs") -> None:
    """A usable list of legs: 1..MAX_LEGS, one of weight > 0, no (provider, account, sender) twice."""
    legs = list(legs)
    if not legs:
        raise RouteConfigError(where, "at least one leg")
    if len(legs) > MAX_LEGS:
        raise RouteConfigError(where, f"at most {MAX_LEGS} legs")
    if not any(leg.weight > 0 for leg in legs):
        raise RouteConfigError(where, "at least one leg needs a weight above 0")
    seen: set[tuple[str, str, str]] = set()
    for i, leg in enumerate(legs):
        key = (leg.provider, leg.account, leg.sender)
        if key in seen:
            raise RouteConfigError(f"{where}[{i}]", "the same provider, account and sender twice")
        seen.add(key)


def match_check(country: str, prefix: str, where: str = "") -> tuple[str, str]:
    country = country.upper()
    if country and not COUNTRY_RE.fullmatch(country):
        raise RouteConfigError(f"{where}country", "an ISO 3166 alpha-2 code, e.g. GB")
    if prefix and not PREFIX_RE.fullmatch(prefix):
        raise RouteConfigError(f"{where}prefix", "an E.164 prefix: + and 1 to 15 digits")
    return country, prefix


def parse(raw: str, providers: Iterable[str], priorities: Iterable[str]) -> tuple[RuleSpec, ...]:
    """``SMSGW_ROUTES`` as rules; ``RouteConfigError`` names the first problem (``[2].legs[0].provider``)."""
    if not raw.strip():
        return ()
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise RouteConfigError("SMSGW_ROUTES", f"not JSON: {exc}") from None
    if not isinstance(data, list):
        raise RouteConfigError("SMSGW_ROUTES", "must be a JSON list of rules")
    providers, priorities = list(providers), sorted(priorities)
    rules: list[RuleSpec] = []
    names: set[str] = set()
    for i, item in enumerate(data):
        where = f"[{i}]."
        if not isinstance(item, dict):
            raise RouteConfigError(f"[{i}]", "must be an object")
        unknown = sorted(set(item) - {"name", "country", "prefix", "priority", "legs"})
        if unknown:
            raise RouteConfigError(f"{where}{unknown[0]}", "unknown field")
        name = _text(item, "name", where, 64) or f"rule-{i + 1}"
        if name in names:
            raise RouteConfigError(f"{where}name", "two rules with one name")
        names.add(name)
        country = _text(item, "country", where, 2)
        country, prefix = match_check(country, _text(item, "prefix", where, 16), where)
        priority = _text(item, "priority", where, 16)
        if priority and priority not in priorities:
            raise RouteConfigError(f"{where}priority", f"must be one of {', '.join(priorities)}")
        legs_raw = item.get("legs")
        if not isinstance(legs_raw, list):
            raise RouteConfigError(f"{where}legs", "must be a list")
        legs = tuple(leg_check(leg, f"{where}legs[{j}].", providers) for j, leg in enumerate(legs_raw))
        legs_check(legs, f"{where}legs")
        rules.append(RuleSpec(name, legs, country, prefix, priority))
    return tuple(rules)


def providers_named(rules: Iterable[RuleSpec]) -> set[str]:
    return {leg.provider for rule in rules for leg in rule.legs}


def leg_public(leg: Mapping[str, str]) -> dict[str, str]:
    """A stored leg of a message's route (``{provider, account, from, pool}``, delivery.routing.birth) as
    the API and the timeline show it: its sender is its From or its sender pool."""
    return {
        "provider": leg.get("provider", ""),
        "account": leg.get("account", ""),
        "sender": leg.get("from") or leg.get("pool") or "",
    }
