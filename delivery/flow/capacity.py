"""Capacity configuration: how many segments per second a sender, a provider account and a tenant may send.

Providers limit throughput per sender, counted in segments (a 3-segment SMS costs 3), and per account.
The defaults are the documented US/Canada limits of the first provider (docs/limits.md, "Sending within
limits"): a long code, a toll-free number and a short code each have their own, and an account has one
across all its senders. A sender pool's (messaging service's) rate is the sum of its senders', which we
cannot see. Each default is a setting (``SMSGW_RATE_*``); a sender or account can be given its own rate
in the admin (``SenderCapacity`` with no tenant, ``AccountCapacity``): the operator's rate. A tenant may
lower the rate of a sender it owns alone through the API (``SenderCapacity`` with its tenant: its own
cap, never above the operator's rate, and ignored once the sender is shared or no longer its own).

Reads are cached per process for CACHE_SECONDS: the release gate asks for every sender of every pass.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import phonenumbers
from django.conf import settings
from django.db.models import Exists, OuterRef, Q

from delivery.models import AccountCapacity, SenderCapacity
from smsgw.config.providers import is_sender_pool
from smsgw.models import TenantSender
from smsgw.tenancy.senders import tenant_senders

CACHE_SECONDS = 2.0
LONG_CODE, TOLL_FREE, SHORT_CODE, ALPHANUMERIC, MESSAGING_SERVICE = (
    "long_code",
    "toll_free",
    "short_code",
    "alphanumeric",
    "messaging_service",
)
SENDER_TYPES = (LONG_CODE, TOLL_FREE, SHORT_CODE, ALPHANUMERIC, MESSAGING_SERVICE)
_SHORT_CODE = re.compile(r"[0-9]{3,8}")  # not \d: it matches any Unicode digit
_ALPHANUMERIC = re.compile(r"[A-Za-z0-9 ]{1,11}")

_cache: dict[tuple, tuple[float, Rate]] = {}


@dataclass(frozen=True)
class Rate:
    segments_per_second: float
    source: str  # "configured" or "default"
    sender_type: str = ""


def sender_type(sender: str) -> str:
    if is_sender_pool(sender):  # a pool id as some provider declares them (its capabilities)
        return MESSAGING_SERVICE
    if sender.startswith("+"):
        try:
            number = phonenumbers.parse(sender)
        except phonenumbers.NumberParseException:
            return LONG_CODE
        if phonenumbers.number_type(number) == phonenumbers.PhoneNumberType.TOLL_FREE:
            return TOLL_FREE
        return LONG_CODE
    if _SHORT_CODE.fullmatch(sender):
        return SHORT_CODE
    return ALPHANUMERIC


def is_valid_sender(sender: str) -> bool:
    if is_sender_pool(sender) or _SHORT_CODE.fullmatch(sender):
        return True
    if sender.startswith("+"):
        try:
            return phonenumbers.is_possible_number(phonenumbers.parse(sender))
        except phonenumbers.NumberParseException:
            return False
    return bool(_ALPHANUMERIC.fullmatch(sender)) and any(c.isalpha() for c in sender)


def default_rate(kind: str) -> float:
    return float(settings.SENDER_RATE_DEFAULTS[kind])


def _cached(key: tuple, load: Callable[[], Rate]) -> Rate:
    now = time.monotonic()
    hit = _cache.get(key)
    if hit is not None and hit[0] > now:
        return hit[1]
    value = load()
    _cache[key] = (now + CACHE_SECONDS, value)
    return value


def cache_clear() -> None:
    _cache.clear()


def _rows(provider: str, account: str, senders: list[str]) -> tuple[dict[str, float], dict[str, float]]:
    """(operator rows, tenants' own caps) of these senders, in one query. A tenant's cap counts only while
    that tenant owns the sender and shares it with no one (smsgw.tenancy.senders): a sender's rate is one
    bucket for everyone sending from it, so a cap must never slow another tenant down."""
    sole_owner = Exists(
        TenantSender.objects.filter(tenant_id=OuterRef("tenant_id"), value=OuterRef("sender"), shared=False)
    )
    rows = SenderCapacity.objects.filter(provider=provider, account=account, sender__in=senders).filter(
        Q(tenant__isnull=True) | sole_owner
    )
    operator: dict[str, float] = {}
    caps: dict[str, float] = {}
    for sender, tenant_id, rate in rows.values_list("sender", "tenant_id", "segments_per_second"):
        into = operator if tenant_id is None else caps
        into[sender] = min(rate, into.get(sender, rate))
    return operator, caps


def sender_rates(provider: str, account: str, senders: list[str]) -> dict[str, Rate]:
    """The rate of each sender: the operator's (its row, else the default for its type), lowered by its
    owner's own cap. One query for the senders not cached."""
    out: dict[str, Rate] = {}
    missing = []
    now = time.monotonic()
    for sender in senders:
        hit = _cache.get(("sender", provider, account, sender))
        if hit is not None and hit[0] > now:
            out[sender] = hit[1]
        else:
            missing.append(sender)
    if missing:
        operator, caps = _rows(provider, account, missing)
        for sender in missing:
            kind = sender_type(sender)
            ceiling = operator.get(sender, default_rate(kind))
            rate = min(ceiling, caps.get(sender, ceiling))
            source = "configured" if sender in operator or sender in caps else "default"
            out[sender] = Rate(rate, source, kind)
            _cache[("sender", provider, account, sender)] = (now + CACHE_SECONDS, out[sender])
    return out


def operator_rate(provider: str, account: str, sender: str) -> float:
    """The operator's rate of a sender (its row, else the default for its type): a tenant's ceiling."""
    row = SenderCapacity.objects.filter(
        provider=provider, account=account, sender=sender, tenant__isnull=True
    ).first()
    return row.segments_per_second if row is not None else default_rate(sender_type(sender))


def account_rate(provider: str, account: str) -> Rate:
    def load() -> Rate:
        row = AccountCapacity.objects.filter(provider=provider, account=account).first()
        if row is not None:
            return Rate(row.segments_per_second, "configured")
        return Rate(float(settings.ACCOUNT_RATE_DEFAULT), "default")

    return _cached(("account", provider, account), load)


class CapacityNotYours(Exception):
    """Not one of the tenant's senders (smsgw.tenancy.senders), or one it shares with another tenant
    (then the rate is the operator's alone)."""


class CapacityAboveCeiling(Exception):
    """A tenant asked for more than the operator's rate of the sender (``ceiling``)."""

    def __init__(self, ceiling: float) -> None:
        super().__init__(ceiling)
        self.ceiling = ceiling


class CapacityProviderUnknown(Exception):
    """A provider the tenant does not send through (no route of its uses it, and it is not the default)."""


def sender_capacity_set(
    *, tenant, sender: str, segments_per_second: float | None, provider: str | None = None
) -> SenderCapacity | None:
    """A tenant sets (or, with None, removes) its own cap on a sender it owns alone on ``provider``: at
    most the operator's rate (CapacityAboveCeiling), applied on top of it, and to no other tenant
    (CapacityNotYours for a sender it does not own or shares there). ``provider`` None: the one provider
    the tenant sends from ``sender`` through, else the default (what the API did before routing); one the
    tenant does not send through is CapacityProviderUnknown. The operator's row, if any, is never changed."""
    from django.db import transaction

    from delivery.providers import get_adapter

    provider = sender_provider(tenant, sender, provider)
    account = get_adapter(provider).account
    owned = TenantSender.objects.filter(tenant=tenant, value=sender).filter(
        Q(provider="") | Q(provider=provider), Q(account="") | Q(account=account)
    )
    if not owned.exists() or owned.filter(shared=True).exists():
        raise CapacityNotYours(sender)
    if segments_per_second is not None:
        ceiling = operator_rate(provider, account, sender)
        if segments_per_second > ceiling:
            raise CapacityAboveCeiling(ceiling)
    with transaction.atomic():
        mine = SenderCapacity.objects.select_for_update().filter(
            provider=provider, account=account, sender=sender, tenant=tenant
        )
        row = mine.first()
        if segments_per_second is None:
            mine.delete()
            result = None
        elif row is None:
            result = SenderCapacity.objects.create(
                provider=provider,
                account=account,
                sender=sender,
                segments_per_second=segments_per_second,
                tenant=tenant,
            )
        else:
            row.segments_per_second = segments_per_second
            row.save(update_fields=["segments_per_second", "updated_at"])
            result = row
    _cache.pop(("sender", provider, account, sender), None)
    return result


def sender_provider(tenant, sender: str, provider: str | None) -> str:
    """The provider a capacity call addresses: the one asked for (CapacityProviderUnknown unless the tenant
    sends through it), else the one provider that lists ``sender``, else the default."""
    senders_by_provider = tenant_provider_senders(tenant)
    if provider is not None:
        if provider not in senders_by_provider:
            raise CapacityProviderUnknown(provider)
        return provider
    listing = [p for p, senders in senders_by_provider.items() if sender in senders]
    return listing[0] if len(listing) == 1 else settings.SMSGW_PROVIDER


def tenant_provider_senders(tenant) -> dict[str, set[str]]:
    """Every provider (a provider key: a second account of a provider is a key of its own) the tenant sends
    through, with the senders it sends from there: the default provider with the tenant's own senders;
    each provider a route of the tenant's uses (its own rules, those for all tenants, the settings') with
    the legs' fixed senders, and the tenant's own senders too when a leg there sends from the message's
    own sender; and each provider a sender was assigned to. The default provider comes first."""
    from django.core.exceptions import ImproperlyConfigured

    from delivery.providers import get_adapter
    from delivery.routing.rules import rules_for

    default = settings.SMSGW_PROVIDER
    assigned = tenant_senders(tenant.pk)
    fixed: dict[str, set[str]] = {default: set()}
    uses_own = {default}
    for rule in rules_for(tenant.pk):
        for leg in rule.legs:
            fixed.setdefault(leg.provider, set())
            if leg.sender:
                fixed[leg.provider].add(leg.sender)
            else:
                uses_own.add(leg.provider)
    for _value, on_provider, _account, _shared in assigned:
        if on_provider:
            fixed.setdefault(on_provider, set())
    own = {s for s in (tenant.default_from, tenant.sender_pool) if s}
    out: dict[str, set[str]] = {}
    for provider, senders in fixed.items():
        try:
            account = get_adapter(provider).account
        except ImproperlyConfigured:  # a rule naming a provider this gateway has not registered
            continue
        mine = {
            value
            for value, on_provider, on_account, _ in assigned
            if on_provider in ("", provider) and on_account in ("", account)
        }
        assigned_here = {
            value
            for value, on_provider, on_account, _ in assigned
            if on_provider == provider and on_account in ("", account)
        }
        out[provider] = senders | assigned_here | ((own | mine) if provider in uses_own else set())
    return out


def tenant_capacity_view(tenant) -> dict:
    """What a tenant sees of its sending limits: for every provider it sends through (``providers``), the
    account's circuit and its senders' rates (configured or default, and the adaptive rate now); its own
    rate limit and quotas. The top-level ``provider``, ``provider_status`` and ``senders`` are the default
    provider's, as the view was before routing."""
    from django.utils import timezone

    from scheduling.limits import quotas

    default = settings.SMSGW_PROVIDER
    providers = [
        _provider_view(provider, senders, default=provider == default)
        for provider, senders in sorted(
            tenant_provider_senders(tenant).items(), key=lambda i: i[0] != default
        )
    ]
    first = providers[0]
    return {
        "provider": first["provider"],
        "provider_status": first["provider_status"],
        "tenant": {"send_rate_per_second": tenant.send_rate_per_second or None},
        "quotas": quotas.usage_view(tenant, timezone.now()),
        "senders": first["senders"],
        "providers": providers,
    }


def _provider_view(provider: str, senders: set[str], *, default: bool) -> dict:
    from delivery.flow import circuit
    from delivery.models import RateBucket
    from delivery.providers import get_adapter

    account = get_adapter(provider).account
    ordered = sorted(senders)
    rates = sender_rates(provider, account, ordered)
    operator, _ = _rows(provider, account, ordered)
    ceilings = {s: operator.get(s, default_rate(sender_type(s))) for s in senders}
    keys = {f"{provider}|{account}|sender|{s}"[:200]: s for s in senders}
    effective = dict(RateBucket.objects.filter(key__in=keys).values_list("key", "rate_effective"))
    state = circuit.circuit_state(provider, account)
    return {
        "provider": provider,
        # Not the account's own id (an operator's secret-adjacent setting, never echoed to tenants): a
        # provider key has one account, and a second account of a provider is a provider key of its own.
        "account": "",
        "default": default,
        "provider_status": {
            "circuit": state.state,
            "since": state.opened_at.isoformat() if state.is_open and state.opened_at else None,
            "next_probe_at": state.next_probe_at.isoformat()
            if state.is_open and state.next_probe_at
            else None,
        },
        "senders": [
            {
                "sender": s,
                "type": rates[s].sender_type,
                "segments_per_second": rates[s].segments_per_second,
                "source": rates[s].source,
                "ceiling_segments_per_second": ceilings[s],
                "effective_segments_per_second": round(
                    min(
                        rates[s].segments_per_second,
                        effective.get(f"{provider}|{account}|sender|{s}"[:200], rates[s].segments_per_second),
                    ),
                    4,
                ),
            }
            for s in ordered
        ],
    }
