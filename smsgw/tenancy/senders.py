"""Senders belong to tenants (docs/senders.md): the one place that assigns and releases a tenant's senders
and answers whether a tenant owns one.

All tenants send through the operator's provider accounts, so without this any tenant could send as any
other (and an opt-out to one tenant's number would land in another's list). An operator assigns each
tenant its senders (the admin, ``manage.py sender_assign``); every path that names a sender asks
``tenant_owns_sender`` (scheduling's ``_sender``, routing legs, the capacity API), and an inbound opt-out
applies to ``sender_owners``. A value another tenant already owns is refused unless the operator marks it
shared, which marks every row of that value shared.

The tenant's default sender (``default_from``, ``sender_pool``) is always one it owns:
``default_senders_assign`` assigns it when it is free, and ``sender_release`` refuses to release it, so
the per-message check can skip it (most messages use the default: no query for them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import Q

from smsgw.config.providers import is_sender_pool
from smsgw.models import SenderKind, Tenant, TenantSender
from smsgw.values.phone import PhoneNumberError, normalize_e164

# As the messages API takes an alphanumeric `from` (at least one letter; 1-11 letters, digits, spaces).
ALPHANUMERIC = re.compile(r"(?=.*[A-Za-z])[A-Za-z0-9 ]{1,11}")
SHORT_CODE = re.compile(r"[0-9]{3,8}")
SENDER_HELP = (
    "an E.164 number, a short code (3-8 digits), an alphanumeric sender id of 1-11 characters or a "
    "sender-pool (messaging service) id"
)


class SenderError(ValueError):
    """A sender that cannot be assigned or released; the message says why (for an operator)."""


def sender_parse(raw: str) -> tuple[str, str]:
    """(kind, normalised value) of a sender as an operator or a request writes it, or SenderError."""
    value = (raw or "").strip()
    if value.startswith("+"):
        try:
            return SenderKind.NUMBER, normalize_e164(value)
        except PhoneNumberError as exc:
            raise SenderError(str(exc)) from exc
    if SHORT_CODE.fullmatch(value):
        return SenderKind.SHORT_CODE, value
    if ALPHANUMERIC.fullmatch(value):
        return SenderKind.ALPHANUMERIC, value
    if value and is_sender_pool(value):
        return SenderKind.POOL, value
    raise SenderError(f"must be {SENDER_HELP}")


def _same_value(value: str) -> Q:
    # An alphanumeric id is the same brand in any case ("ACME", "Acme"): a conflict whatever the case.
    return Q(value__iexact=value) if ALPHANUMERIC.fullmatch(value) else Q(value=value)


@transaction.atomic
def sender_assign(
    *, tenant: Tenant, sender: str, provider: str = "", account: str = "", shared: bool = False
) -> TenantSender:
    """Give ``tenant`` this sender (on one provider and account, or any). Refused (SenderError) when
    another tenant owns the same value and ``shared`` is not given; with it, every row of the value is
    marked shared. Assigning a sender the tenant already has returns its row (shared set if asked)."""
    kind, value = sender_parse(sender)
    # The value's rows locked: a release or another share of it waits for this one. (Two first
    # assignments of a free value racing is an operator race the admin's history shows.)
    rows = list(TenantSender.objects.select_for_update().filter(_same_value(value)))
    if any(r.tenant_id != tenant.pk for r in rows) and not shared:
        raise SenderError(
            f"{value} is already assigned to another tenant; an operator can assign it as shared "
            "(both tenants then send from it and an opt-out on it applies to both)"
        )
    row, _ = TenantSender.objects.get_or_create(
        tenant=tenant, value=value, provider=provider, account=account, defaults={"kind": kind}
    )
    if shared:
        TenantSender.objects.filter(_same_value(value)).update(shared=True)
        row.refresh_from_db()
    return row


@transaction.atomic
def sender_release(*, tenant: Tenant, sender: str, provider: str | None = None) -> int:
    """Take the sender from ``tenant`` (all its rows of that value, or those of one provider). Refused
    while it is the tenant's default sender. A value left with one tenant is no longer shared. Messages
    already accepted keep their sender; new requests naming it are refused. Returns the rows removed."""
    _, value = sender_parse(sender)
    if value in {tenant.default_from, tenant.sender_pool}:
        raise SenderError(f"{value} is the tenant's default sender: change the default first")
    rows = TenantSender.objects.filter(tenant=tenant, value=value)
    if provider is not None:
        rows = rows.filter(provider=provider)
    removed, _ = rows.delete()
    left = TenantSender.objects.filter(value=value)
    if removed and len({t for t in left.values_list("tenant_id", flat=True)}) == 1:
        left.update(shared=False)
    return removed


def default_sender_problem(tenant: Tenant | None, sender: str) -> str | None:
    """Why ``sender`` cannot be the default of ``tenant`` (None: a tenant not saved yet), or None: it is
    the tenant's already, or no tenant's (saving assigns it, ``default_senders_assign``)."""
    try:
        _, value = sender_parse(sender)
    except SenderError as exc:
        return str(exc)
    mine = tenant is not None and tenant.pk is not None
    if mine and TenantSender.objects.filter(tenant=tenant, value=value).exists():
        return None
    if sender_taken(tenant, value):
        return f"{value} is another tenant's sender: assign it to this tenant as shared first"
    return None


def sender_taken(tenant: Tenant | None, value: str) -> bool:
    """Whether a tenant other than ``tenant`` owns this (normalised) sender, in any case for an
    alphanumeric id."""
    rows = TenantSender.objects.filter(_same_value(value))
    if tenant is not None and tenant.pk is not None:
        rows = rows.exclude(tenant=tenant)
    return rows.exists()


@transaction.atomic
def default_senders_assign(*, tenant: Tenant, shared: bool = False) -> None:
    """Make the tenant own its default sender and sender pool (``tenant_create``, the admin): each is
    assigned when it is free (or, with ``shared``, shared with the tenants that have it), else
    SenderError naming it."""
    for value in (tenant.default_from, tenant.sender_pool):
        if value and not TenantSender.objects.filter(tenant=tenant, value=value).exists():
            sender_assign(tenant=tenant, sender=value, shared=shared)


def tenant_owns_sender(tenant: Tenant, sender: str, *, provider: str = "", account: str = "") -> bool:
    """Whether ``tenant`` may send from this (normalised) sender; with ``provider`` (and ``account``),
    on that provider (a row with none is valid on any). One index probe."""
    rows = TenantSender.objects.filter(tenant_id=tenant.pk, value=sender)
    if provider:
        rows = rows.filter(Q(provider="") | Q(provider=provider))
    if account:
        rows = rows.filter(Q(account="") | Q(account=account))
    return rows.exists()


def sender_owners(senders: list[str]) -> list[int]:
    """The ids of the tenants that own any of these senders (an inbound message's number and pool)."""
    values = [s for s in senders if s]
    if not values:
        return []
    return sorted(set(TenantSender.objects.filter(value__in=values).values_list("tenant_id", flat=True)))


def tenant_senders(tenant_id: int) -> list[tuple[str, str, str, bool]]:
    """The tenant's senders as (value, provider, account, shared)."""
    return list(
        TenantSender.objects.filter(tenant_id=tenant_id).values_list("value", "provider", "account", "shared")
    )


@dataclass
class OwnershipCheck:
    """``tenant_owns_sender`` asked once per distinct sender within one request (a batch's items mostly
    name the same one). The tenant's defaults are owned by construction: no query for them."""

    tenant: Tenant
    _known: dict[str, bool] = field(default_factory=dict)

    def owns(self, sender: str) -> bool:
        if sender in (self.tenant.default_from, self.tenant.sender_pool):
            return True
        if sender not in self._known:
            self._known[sender] = tenant_owns_sender(self.tenant, sender)
        return self._known[sender]
