"""Reads behind the campaign API. Every query starts from the tenant (or a campaign found through it)."""

from __future__ import annotations

from django.db.models import QuerySet

from scheduling.models import Campaign, CampaignError, Message, Status
from smsgw.domain_errors import InvalidInput
from smsgw.models import Tenant


def campaign_list(*, tenant: Tenant) -> QuerySet[Campaign]:
    return Campaign.objects.filter(tenant=tenant)  # newest first by the page's ordering (cmp_tenant_recent)


def campaign_messages(*, campaign: Campaign, params) -> QuerySet[Message]:
    """The campaign's messages, optionally of some statuses: walks msg_campaign_status (campaign, status,
    -id), so a page costs its size whatever the campaign's."""
    # Those the tenant deleted are gone for it (a residual filter: almost every row has none).
    qs = Message.objects.filter(campaign=campaign, tenant_id=campaign.tenant_id, deleted_at__isnull=True)
    raw = params.get("status")
    if raw is not None:
        statuses = [s.strip() for s in raw.split(",") if s.strip()]
        bad = [s for s in statuses if s not in Status.values]
        if not statuses or bad:
            raise InvalidInput(
                "status", f"must be one or more of {', '.join(Status.values)}", reason="invalid_choice"
            )
        qs = qs.filter(status__in=statuses)
    return qs


def campaign_errors(*, campaign: Campaign) -> QuerySet[CampaignError]:
    return CampaignError.objects.filter(campaign=campaign)
