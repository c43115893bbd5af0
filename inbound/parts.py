"""A long inbound message posted part by part (Vonage: each part its own webhook, with ``concat-ref``,
``concat-total`` and ``concat-part``; developer.vonage.com/messaging/sms/guides/inbound-sms, "Concatenated
messages") becomes one message, its text in part order whatever order the parts came in (jasmin #513
assumed arrival order). The parts wait in ``InboundPart``; a group is joined once every part is there, or
once ``INBOUND_PARTS_WAIT_SECONDS`` have passed since its first part (a part that never comes must not
hold the rest for ever: the message is made of what came, ``parts_missing`` names the rest).

Joining is one transaction over the group's rows, locked (SKIP LOCKED: two processors never join one
group twice), and the message it makes has the provider id of its lowest part, unique like any other.
A part that comes after its group was joined without it (past the wait) is stored as a message of its
own, its ``parts_missing`` naming the others: late, but never lost."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Min

from inbound.models import InboundMessage, InboundPart, InboundState
from smsgw.runtime.db import is_postgres

GROUPS_PER_PASS = 200  # bounded: a pass takes at most this many groups, the next pass the rest


def parts_join_due(now: datetime) -> int:
    """Join every waiting group that is complete or has waited long enough; returns messages made."""
    waited = now - timedelta(seconds=settings.INBOUND_PARTS_WAIT_SECONDS)
    groups = (
        InboundPart.objects.filter(message__isnull=True)
        .values("provider", "from_number", "to_number", "concat_ref")
        .annotate(first=Min("received_at"))
        .order_by("first")[:GROUPS_PER_PASS]
    )
    made = 0
    for group in groups:
        key = (group["provider"], group["from_number"], group["to_number"], group["concat_ref"])
        with transaction.atomic():
            made += _join(key, waited_enough=group["first"] <= waited, now=now)
    return made


def _join(key: tuple[str, str, str, str], *, waited_enough: bool, now: datetime) -> int:
    provider, from_number, to_number, ref = key
    qs = InboundPart.objects.filter(
        provider=provider, from_number=from_number, to_number=to_number, concat_ref=ref, message__isnull=True
    ).order_by("part", "id")
    if is_postgres():
        qs = qs.select_for_update(skip_locked=True)
    parts = list(qs)
    if not parts:
        return 0
    total = max(p.total for p in parts)
    by_number: dict[int, InboundPart] = {}
    for part in parts:
        by_number.setdefault(part.part, part)  # the same part number twice (two ids): the first
    missing = [n for n in range(1, total + 1) if n not in by_number]
    if missing and not waited_enough:
        return 0
    ordered = [by_number[n] for n in sorted(by_number)]
    first = ordered[0]
    message = InboundMessage.objects.create(
        provider=provider,
        provider_message_id=first.provider_message_id,
        from_number=from_number,
        to_number=to_number,
        sender_pool=first.sender_pool,
        body="".join(p.body for p in ordered),
        segments=len(ordered),
        state=InboundState.PENDING,
        payload={**first.payload, "concat_ref": ref},
        parts=total,
        parts_missing=missing,
        provider_sent_at=first.provider_sent_at,
        received_at=min(p.received_at for p in parts),
        next_try_at=now,
    )
    InboundPart.objects.filter(pk__in=[p.pk for p in parts]).update(message=message)
    return 1
