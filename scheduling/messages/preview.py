"""What a new message (or schedule) would be, without storing it: the console's create form shows it
before the operator confirms (docs/admin.md, "Creating a message"). The same checks as the API's create
(scheduling.messages.service.message_build, scheduling.schedules.service's definition) and the same
router as a birth (smsgw.stages.router), so the preview is what the confirmation then stores through
message_create / schedule_create; nothing is written here."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from scheduling.messages.service import message_build
from scheduling.schedules.service import _definition
from smsgw import stages
from smsgw.models import Tenant

OCCURRENCES_SHOWN = 5


@dataclass
class Preview:
    to: str
    due_at: datetime  # UTC; the first occurrence for a schedule
    timezone: str
    dst_adjustment: str
    segments: int
    encoding: str
    from_number: str
    sender_pool: str
    provider: str
    route: str  # the routing rule that matched, "" for the default provider
    quiet_hours_moved_from: datetime | None = None
    occurrences: list[datetime] = field(default_factory=list)  # a schedule's first few (UTC)
    rrule: str = ""


def message_preview(*, tenant: Tenant, data: dict[str, Any], now: datetime | None = None) -> Preview:
    """The message ``data`` (the API's create fields; with ``rrule`` and ``start``, a schedule's) would
    make. Raises InvalidInput naming the field, as the API would."""
    now = now or timezone.now()
    if data.get("rrule"):
        return _schedule_preview(tenant, data, now)
    message, _ = message_build(tenant=tenant, data=data, idempotency_key=None, fingerprint="", now=now)
    stages.router()([(message, {})])
    return Preview(
        to=message.to,
        due_at=message.due_at,
        timezone=message.requested_timezone or tenant.default_timezone or "UTC",
        dst_adjustment=message.dst_adjustment,
        segments=message.segments,
        encoding=message.encoding,
        from_number=message.from_number,
        sender_pool=message.sender_pool,
        provider=message.provider,
        route=message.route,
        quiet_hours_moved_from=message.quiet_deferred_from,
    )


def _schedule_preview(tenant: Tenant, data: dict[str, Any], now: datetime) -> Preview:
    definition = _definition(tenant, data, now=now)
    values = definition.values
    upcoming = []
    for occurrence in definition.recurrence.after(now):
        upcoming.append(occurrence)
        if len(upcoming) == OCCURRENCES_SHOWN:
            break
    first = upcoming[0]
    # The route its first occurrence would take (occurrences are born, and routed, one by one).
    probe, _ = message_build(
        tenant=tenant,
        data={
            "to": values["to"],
            "body": values["body"],
            "from": values["from_number"] or None,
            "priority": values["priority"],
        },
        idempotency_key=None,
        fingerprint="",
        now=now,
    )
    stages.router()([(probe, {})])
    return Preview(
        to=values["to"],
        due_at=first.due_at,
        timezone=values["timezone"],
        dst_adjustment=first.adjustment.value,
        segments=values["segments"],
        encoding=values["encoding"],
        from_number=probe.from_number,
        sender_pool=probe.sender_pool,
        provider=probe.provider,
        route=probe.route,
        occurrences=[o.due_at for o in upcoming],
        rrule=values["rrule"],
    )


__all__ = ["OCCURRENCES_SHOWN", "Preview", "message_preview"]
