"""Each tenant's retention horizons: its own (retention.models.TenantRetention) or the gateway's defaults
(settings RETENTION_CONTENT_DAYS / RETENTION_RECORD_DAYS)."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from retention.models import TenantRetention
from smsgw.domain_errors import InvalidInput
from smsgw.models import Tenant

# A tenant may keep content and records for at most ten years; a larger number is a typo, not a policy.
MAX_DAYS = 3650


@dataclass(frozen=True)
class Horizons:
    content_days: int
    record_days: int


def defaults() -> Horizons:
    return Horizons(settings.RETENTION_CONTENT_DAYS, settings.RETENTION_RECORD_DAYS)


def _merge(row: TenantRetention | None, base: Horizons) -> Horizons:
    if row is None:
        return base
    content = row.content_days if row.content_days is not None else base.content_days
    record = row.record_days if row.record_days is not None else base.record_days
    # A record cannot go before its content (a tenant's shorter record horizon shortens content too).
    return Horizons(min(content, record), record)


def horizons_for(tenant_id: int) -> Horizons:
    return _merge(TenantRetention.objects.filter(tenant_id=tenant_id).first(), defaults())


def horizons_overridden() -> dict[int, Horizons]:
    """Every tenant with its own horizons (one small table: a row per tenant that set one)."""
    base = defaults()
    return {row.tenant_id: _merge(row, base) for row in TenantRetention.objects.all()}


def horizons_many(tenant_ids: set[int]) -> dict[int, Horizons]:
    base = defaults()
    rows = {r.tenant_id: r for r in TenantRetention.objects.filter(tenant_id__in=tenant_ids)}
    return {tid: _merge(rows.get(tid), base) for tid in tenant_ids}


def tenant_retention_set(
    *, tenant_id: int, content_days: int | None, record_days: int | None, actor: str
) -> Horizons:
    """Set a tenant's own horizons (None: the gateway's default); InvalidInput naming the field when they
    cannot hold (the record horizon shorter than the content one). Messages that already moved to history
    keep the purge day they moved with (docs/retention.md, "Changing a horizon")."""
    base = defaults()
    content = content_days if content_days is not None else base.content_days
    record = record_days if record_days is not None else base.record_days
    if record < content:
        raise InvalidInput(
            "record_days", f"must be at least content_days ({content}): a record cannot go first"
        )
    TenantRetention.objects.update_or_create(
        tenant_id=tenant_id,
        defaults={"content_days": content_days, "record_days": record_days, "updated_by": actor[:200]},
    )
    return Horizons(content, record)


def content_days_for(tenant: Tenant) -> int:
    """Days after a message is final before its content goes (body, full number, metadata)."""
    return horizons_for(tenant.pk).content_days


def record_days_for(tenant: Tenant) -> int:
    """Days after a message is final before its record goes."""
    return horizons_for(tenant.pk).record_days
