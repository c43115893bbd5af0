"""Reads of a tenant's exports (the API and the download). An expired export is gone from the tenant's
view at ``expires_at``, whether or not the prune has removed its file yet."""

from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet

from retention.models import Export
from smsgw.domain_errors import NotFoundError
from smsgw.models import Tenant


def export_list(*, tenant: Tenant, now: datetime) -> QuerySet[Export]:
    # Tenant in the filter: another tenant's exports are never in the answer.
    return Export.objects.filter(tenant=tenant, expires_at__gt=now)


def export_get(*, tenant: Tenant, public_id: str, now: datetime) -> Export:
    export = export_list(tenant=tenant, now=now).filter(public_id=public_id).first()
    if export is None:
        raise NotFoundError("No export with this id.")
    return export
