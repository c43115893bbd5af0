"""The one writer of campaign status.

Like a message's (scheduling.lifecycle.transitions), every change is a compare-and-set: an UPDATE whose WHERE
clause names the statuses it may come from, so of two racing changes one moves the row and the other
is told it did not (the creation job finishing while a pause commits, a completion pass racing a
cancel). Each edge writes its own timestamps and bumps the campaign's version.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import F
from django.utils import timezone

from scheduling.lifecycle.transitions import NOW, TransitionNotAllowed
from scheduling.models import Campaign, CampaignStatus

C = CampaignStatus
# Every allowed edge and the timestamps it writes (NOW: the move's time; None: emptied).
EDGES: dict[tuple[str, str], dict[str, object]] = {
    (C.CREATING, C.ACTIVE): {"made_at": NOW},  # the creation job read the list to its end
    (C.CREATING, C.FAILED): {},  # the list could not be read (status_reason says why)
    (C.CREATING, C.PAUSED): {"paused_at": NOW},
    (C.ACTIVE, C.PAUSED): {"paused_at": NOW},
    (C.PAUSED, C.ACTIVE): {"paused_at": None},
    (C.PAUSED, C.CREATING): {"paused_at": None},  # paused before its creation job finished
    (C.CREATING, C.CANCELLED): {"cancelled_at": NOW},
    (C.ACTIVE, C.CANCELLED): {"cancelled_at": NOW},
    (C.PAUSED, C.CANCELLED): {"cancelled_at": NOW},
    (C.ACTIVE, C.COMPLETED): {"completed_at": NOW},  # every message final (scheduling.campaigns.control)
}
ALLOWED: frozenset[tuple[str, str]] = frozenset(EDGES)
# What a caller may set along with the status; the stamps come from EDGES.
SETTABLE = frozenset({"status_reason"})


def campaign_transition(
    campaign: Campaign | int,
    *,
    from_status: str,
    to_status: str,
    set_fields: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> bool:
    """Move the campaign from ``from_status`` to ``to_status``, if it is still in ``from_status``.
    Returns whether it moved. Given a Campaign, a campaign that moved shows its new state (status,
    stamps, version) without a reload; one that did not is left as it was read."""
    if (from_status, to_status) not in ALLOWED:
        raise TransitionNotAllowed(f"campaign {from_status} -> {to_status}")
    unknown = set(set_fields or {}) - SETTABLE
    if unknown:
        raise ValueError(f"not settable by a campaign transition: {sorted(unknown)}")
    now = now or timezone.now()
    stamps = EDGES[(from_status, to_status)].items()
    fields = {column: now if value is NOW else value for column, value in stamps} | (set_fields or {})
    campaign_id = campaign.pk if isinstance(campaign, Campaign) else campaign
    moved = Campaign.objects.filter(pk=campaign_id, status=from_status).update(
        status=to_status, version=F("version") + 1, updated_at=now, **fields
    )
    if moved and isinstance(campaign, Campaign):
        for column, value in fields.items():
            setattr(campaign, column, value)
        campaign.status, campaign.updated_at = to_status, now
        campaign.version += 1
    return moved == 1
