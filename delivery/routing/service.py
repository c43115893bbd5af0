"""Checking a routing rule edited in the admin before it is saved: what ``SMSGW_ROUTES`` is checked for at
start (smsgw.config.routes: a registered provider, weights from 0 to 1000, at least one leg of weight
above 0, no leg twice), and what only a running process can tell:

- the provider answers, or gives up, well inside a sending lease (its request timeout below
  ``SENDING_LEASE_SECONDS``, as config.settings requires of the providers the settings route to): the
  reconciler must never look a message up while its worker may still be waiting on that provider;
- in production, the provider has its credentials and its callback-signing secret (its package's
  ``problem``, what start-up requires of the providers the settings route to): a route must not make a
  provider reachable whose receipts and STOPs could not be verified;
- an account is the provider's configured one (or empty): holds, capacity and the circuit are keyed by
  the account the adapter really submits with, so a leg naming another would be neither;
- a sender is one the provider can take: an E.164 number, a short code or an alphanumeric sender id, or
  a sender-pool id only where the provider declares sender pools of that shape (its ``Capabilities``).

Each problem is a ``RouteConfigError`` whose ``field`` names what to correct (``prefix``,
``legs[1].sender``); the admin's forms put it on that field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django.conf import settings

from delivery.flow import capacity
from delivery.providers import PROVIDERS, get_adapter
from delivery.routing.models import MAX_WEIGHT, NAME_MAX
from scheduling.models import Priority
from smsgw.channels import DEFAULT_CHANNEL, AddressError
from smsgw.config import providers as declarations
from smsgw.config.routes import MAX_LEGS as MAX_LEGS
from smsgw.config.routes import LegSpec, RouteConfigError, RuleSpec, leg_check, legs_check, match_check

SENDER_HELP = "an E.164 number, a short code or an alphanumeric sender id of 1-11 characters"


def route_leg_check(
    *, provider: str, account: str = "", sender: str = "", weight: int = 1, where: str = ""
) -> LegSpec:
    """One leg, as it would be saved (sender normalised); ``where`` prefixes the field named in an error
    (``legs[1].``)."""
    leg = leg_check(
        {"provider": provider, "account": account, "sender": sender, "weight": weight}, where, PROVIDERS
    )
    adapter = get_adapter(leg.provider)
    lease = settings.SENDING_LEASE_SECONDS
    if adapter.request_timeout >= lease:
        declared = declarations.provider_settings(leg.provider)
        setting = declared.request_timeout_setting if declared and declared.request_timeout_setting else ""
        what = f"its request timeout ({adapter.request_timeout:g} s{', ' + setting if setting else ''})"
        raise RouteConfigError(
            f"{where}provider", f"{what} must be shorter than SMSGW_SENDING_LEASE_SECONDS ({lease} s)"
        )
    declared_settings = declarations.provider_settings(leg.provider)
    if settings.PRODUCTION and declared_settings is not None and declared_settings.problem:
        raise RouteConfigError(
            f"{where}provider", f"not configured on this gateway: {declared_settings.problem}"
        )
    if leg.account and leg.account != adapter.account:
        # The configured account is not echoed: an operator who needs it finds it in the deployment's
        # settings, not in a form error.
        raise RouteConfigError(
            f"{where}account", f"must be empty or the account {leg.provider} is configured with"
        )
    clean_sender = _sender(leg.provider, leg.sender, where) if leg.sender else ""
    return LegSpec(leg.provider, leg.account, clean_sender, leg.weight)


def _sender(provider: str, sender: str, where: str) -> str:
    pools = get_adapter(provider).capabilities.sender_pools
    if pools is not None and pools.matches(sender):
        return sender
    if declarations.is_sender_pool(sender):  # another provider's pool id: meaningless to this one
        if pools is None:
            raise RouteConfigError(f"{where}sender", f"a sender pool id, and {provider} has no sender pools")
        raise RouteConfigError(f"{where}sender", f"not a sender pool id of {provider}: {pools.description}")
    if sender.startswith("+"):
        try:
            return DEFAULT_CHANNEL.address(sender)
        except AddressError as exc:
            raise RouteConfigError(f"{where}sender", str(exc)) from None
    if not capacity.is_valid_sender(sender):
        extra = f", or a sender pool id ({pools.description})" if pools is not None else ""
        raise RouteConfigError(f"{where}sender", f"must be {SENDER_HELP}{extra}")
    return sender


def route_match_check(*, country: str = "", prefix: str = "", priority: str = "") -> tuple[str, str, str]:
    """(country, prefix, priority) as they would be saved: country upper-case."""
    country, prefix = match_check((country or "").strip(), (prefix or "").strip())
    priority = (priority or "").strip()
    if priority and priority not in Priority.values:
        raise RouteConfigError("priority", f"must be empty or one of {', '.join(Priority.values)}")
    return country, prefix, priority


def route_legs_check(legs: Sequence[LegSpec]) -> None:
    """The legs together (each already checked): 1..MAX_LEGS, one of weight > 0, none twice."""
    legs_check(legs, "legs")


def route_rule_check(
    *,
    name: str,
    country: str = "",
    prefix: str = "",
    priority: str = "",
    legs: Sequence[Mapping[str, object]],
) -> RuleSpec:
    """A whole rule, as the admin would save it; ``RouteConfigError`` names the first problem."""
    name = (name or "").strip()
    if not name:
        raise RouteConfigError("name", "required")
    if len(name) > NAME_MAX:
        raise RouteConfigError("name", f"at most {NAME_MAX} characters")
    country, prefix, priority = route_match_check(country=country, prefix=prefix, priority=priority)
    checked = []
    for i, raw in enumerate(legs):
        weight = raw.get("weight", 1)
        checked.append(
            route_leg_check(
                provider=str(raw.get("provider") or ""),
                account=str(raw.get("account") or ""),
                sender=str(raw.get("sender") or ""),
                weight=weight if isinstance(weight, int) else -1,
                where=f"legs[{i}].",
            )
        )
    route_legs_check(checked)
    return RuleSpec(name, tuple(checked), country, prefix, priority)


__all__ = [
    "MAX_LEGS",
    "MAX_WEIGHT",
    "RouteConfigError",
    "route_leg_check",
    "route_legs_check",
    "route_match_check",
    "route_rule_check",
]
