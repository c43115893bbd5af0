"""Campaigns and schedules at the horizons (docs/retention.md, "What goes when"): the definitions that
made messages hold message data too (a campaign's body or template, its rejected rows' numbers; a
schedule's recipient and body, in every version). Once a campaign or a schedule is over (completed,
cancelled, failed; ended, cancelled) its content goes at the tenant's content horizon and its record at
the record horizon, after its last message has left the operational tables (the messages point at it)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from retention.horizons import defaults, horizons_overridden
from scheduling.models import (
    Campaign,
    CampaignError,
    CampaignStatus,
    Message,
    Schedule,
    ScheduleStatus,
    ScheduleVersion,
)
from smsgw.values.phone import mask

CAMPAIGN_OVER = (CampaignStatus.COMPLETED, CampaignStatus.CANCELLED, CampaignStatus.FAILED)
SCHEDULE_OVER = (ScheduleStatus.ENDED, ScheduleStatus.CANCELLED)


def horizon_groups(kind: str) -> list[tuple[int, Q]]:
    """Each horizon in force (``content_days`` or ``record_days``) with the tenants it applies to: one
    group per value a tenant set, and the default for every other tenant."""
    overridden = horizons_overridden()
    by_days: dict[int, list[int]] = defaultdict(list)
    for tenant_id, h in overridden.items():
        by_days[getattr(h, kind)].append(tenant_id)
    groups = [(days, Q(tenant_id__in=ids)) for days, ids in by_days.items()]
    groups.append((getattr(defaults(), kind), ~Q(tenant_id__in=list(overridden))))
    return groups


def definitions_content_remove(*, now: dt.datetime, limit: int | None = None) -> dict[str, int]:
    limit = limit or settings.RETENTION_BATCH_SIZE
    done: dict[str, int] = defaultdict(int)
    for days, scope in horizon_groups("content_days"):
        cutoff = now - dt.timedelta(days=days)
        campaigns = list(
            Campaign.objects.filter(scope, status__in=CAMPAIGN_OVER, updated_at__lt=cutoff)
            .exclude(body="", metadata={})
            .values_list("id", flat=True)[:limit]
        )
        if campaigns:
            with transaction.atomic():
                done["campaign"] += Campaign.objects.filter(id__in=campaigns).update(
                    body="", metadata={}, variables=[]
                )
                done["campaignerror"] += (
                    CampaignError.objects.filter(campaign_id__in=campaigns).exclude(phone="").update(phone="")
                )
        schedules = list(
            Schedule.objects.filter(scope, status__in=SCHEDULE_OVER, updated_at__lt=cutoff)
            .exclude(body="")
            .values_list("id", "to")[:limit]
        )
        if schedules:
            with transaction.atomic():
                for pk, to in schedules:
                    Schedule.objects.filter(id=pk).update(body="", metadata={}, to=mask(to)[:20])
                done["schedule"] += len(schedules)
                done["scheduleversion"] += ScheduleVersion.objects.filter(
                    schedule_id__in=[pk for pk, _ in schedules]
                ).update(definition={})
    return {k: v for k, v in done.items() if v}


# What is over, and the message column that points at it: a definition goes only once no live message
# does (the messages' foreign keys protect it; moved ones keep its id as a plain number).
_PRUNABLE = ((Campaign, CAMPAIGN_OVER, "campaign_id"), (Schedule, SCHEDULE_OVER, "schedule_id"))


def definitions_prune(*, now: dt.datetime, limit: int | None = None) -> dict[str, int]:
    limit = limit or settings.RETENTION_BATCH_SIZE
    done: dict[str, int] = defaultdict(int)
    for days, scope in horizon_groups("record_days"):
        cutoff = now - dt.timedelta(days=days)
        for model, over, column in _PRUNABLE:
            live = Message.objects.filter(**{column: OuterRef("pk")})
            ids = list(
                model.objects.filter(scope, status__in=over, updated_at__lt=cutoff)
                .exclude(Exists(live))
                .values_list("id", flat=True)[:limit]
            )
            if ids:
                _n, counts = model.objects.filter(id__in=ids).delete()
                for label, n in counts.items():
                    done[label.split(".")[-1].lower()] += n
    return {k: v for k, v in done.items() if v}
