"""A tenant's retention horizons: its own (retention.models.TenantRetention) where it set one, else the
gateway's defaults (settings ``RETENTION_CONTENT_DAYS`` / ``RETENTION_RECORD_DAYS``)."""

from __future__ import annotations

from django.conf import settings

from retention.models import TenantRetention
from smsgw.models import Tenant


def _own(tenant: Tenant) -> TenantRetention | None:
    try:
        return tenant.retention
    except TenantRetention.DoesNotExist:
        return None


def content_days_for(tenant: Tenant) -> int:
    """Days after a message is final before its content goes (body, full number, metadata)."""
    own = _own(tenant)
    if own is not None and own.content_days is not None:
        return own.content_days
    return settings.RETENTION_CONTENT_DAYS


def record_days_for(tenant: Tenant) -> int:
    """Days after a message is final before its record goes."""
    own = _own(tenant)
    if own is not None and own.record_days is not None:
        return own.record_days
    return settings.RETENTION_RECORD_DAYS
