"""Capacity configuration: how many segments per second a sender, a provider account and a tenant may send.

Providers limit throughput per sender, counted in segments (a 3-segment SMS costs 3), and per account.
The defaults are the documented US/Canada limits of the first provider (docs/limits.md, "Sending within
limits"): a long code, a toll-free number and a short code each have their own, and an account has one
across all its senders. A sender pool's (messaging service's) rate is the sum of its senders', which we
cannot see. Each default is a setting (``SMSGW_RATE_*``); a sender or account can be given its own rate
in the admin or, for a sender, through the tenant API (``SenderCapacity``, ``AccountCapacity``).

Reads are cached per process for CACHE_SECONDS: the release gate asks for every sender of every pass.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import phonenumbers
from django.conf import settings

from delivery.models import AccountCapacity, SenderCapacity
from smsgw.config.providers import is_sender_pool

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


def sender_rates(provider: str, account: str, senders: list[str]) -> dict[str, Rate]:
    """The rate of each sender: its configured row, else the default for its type. One query for the
    senders not cached."""
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
        configured = dict(
            SenderCapacity.objects.filter(provider=provider, account=account, sender__in=missing).values_list(
                "sender", "segments_per_second"
            )
        )
        for sender in missing:
            kind = sender_type(sender)
            rate = (
                Rate(configured[sender], "configured", kind)
                if sender in configured
                else Rate(default_rate(kind), "default", kind)
            )
            _cache[("sender", provider, account, sender)] = (now + CACHE_SECONDS, rate)
            out[sender] = rate
    return out


def account_rate(provider: str, account: str) -> Rate:
    def load() -> Rate:
        row = AccountCapacity.objects.filter(provider=provider, account=account).first()
        if row is not None:
            return Rate(row.segments_per_second, "configured")
        return Rate(float(settings.ACCOUNT_RATE_DEFAULT), "default")

    return _cached(("account", provider, account), load)


class CapacityNotYours(Exception):
    """The sender's rate was set by an operator or another tenant: not this tenant's to change."""


def sender_capacity_set(*, tenant, sender: str, segments_per_second: float | None) -> SenderCapacity | None:
    """A tenant sets (or, with None, removes) the rate of a sender it uses. A rate an operator set, or
    another tenant, stays as it is (CapacityNotYours)."""
    from django.db import transaction

    from delivery.providers import get_adapter

    adapter = get_adapter()
    with transaction.atomic():
        row = (
            SenderCapacity.objects.select_for_update()
            .filter(provider=adapter.name, account=adapter.account, sender=sender)
            .first()
        )
        if row is not None and row.tenant_id != tenant.pk:
            raise CapacityNotYours(sender)
        if segments_per_second is None:
            if row is not None:
                row.delete()
            result = None
        elif row is None:
            result = SenderCapacity.objects.create(
                provider=adapter.name,
                account=adapter.account,
                sender=sender,
                segments_per_second=segments_per_second,
                tenant=tenant,
            )
        else:
            row.segments_per_second = segments_per_second
            row.save(update_fields=["segments_per_second", "updated_at"])
            result = row
    _cache.pop(("sender", adapter.name, adapter.account, sender), None)
    return result


def tenant_capacity_view(tenant) -> dict:
    """What a tenant sees of its sending limits: its senders' rates (configured or default, and the
    adaptive rate now), the account's circuit, and its own rate limit."""
    from django.utils import timezone

    from delivery.flow import circuit
    from delivery.models import RateBucket
    from delivery.providers import get_adapter
    from smsgw.limits import quotas

    adapter = get_adapter()
    provider, account = adapter.name, adapter.account
    senders = {s for s in (tenant.default_from, tenant.messaging_service_sid) if s}
    senders |= set(
        SenderCapacity.objects.filter(provider=provider, account=account, tenant=tenant).values_list(
            "sender", flat=True
        )
    )
    rates = sender_rates(provider, account, sorted(senders))
    keys = {f"{provider}|{account}|sender|{s}"[:200]: s for s in senders}
    effective = dict(RateBucket.objects.filter(key__in=keys).values_list("key", "rate_effective"))
    state = circuit.circuit_state(provider, account)
    return {
        "provider": provider,
        "provider_status": {
            "circuit": state.state,
            "since": state.opened_at.isoformat() if state.is_open and state.opened_at else None,
            "next_probe_at": state.next_probe_at.isoformat()
            if state.is_open and state.next_probe_at
            else None,
        },
        "tenant": {"send_rate_per_second": tenant.send_rate_per_second or None},
        "quotas": quotas.usage_view(tenant, timezone.now()),
        "senders": [
            {
                "sender": s,
                "type": rates[s].sender_type,
                "segments_per_second": rates[s].segments_per_second,
                "source": rates[s].source,
                "effective_segments_per_second": round(
                    min(
                        rates[s].segments_per_second,
                        effective.get(f"{provider}|{account}|sender|{s}"[:200], rates[s].segments_per_second),
                    ),
                    4,
                ),
            }
            for s in sorted(senders)
        ],
    }
