"""Inbound messages for the tests of the operator side (admin, metrics, retention): stored and processed
through the real path (inbound.intake, inbound.process), or written as a row at the state a test needs."""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from django.utils import timezone

from delivery.providers.types import InboundMessage as Parsed
from inbound.intake import inbound_store
from inbound.models import InboundMessage, InboundPart, InboundState
from inbound.process import inbound_process_due
from smsgw.models import Tenant
from tests.factories import RECIPIENT, SENDER


def inbound_receive(
    body: str,
    *,
    from_number: str = RECIPIENT,
    to_number: str = SENDER,
    provider: str = "twilio",
    message_id: str = "",
    received_at: datetime | None = None,
) -> InboundMessage:
    """One inbound message as its provider's webhook brings it, then processed (tenant, keyword,
    message.received webhook)."""
    parsed = Parsed(
        body=body,
        from_number=from_number,
        to_number=to_number,
        message_id=message_id or "SM" + secrets.token_hex(16),
        payload={"AccountSid": "AC" + "0" * 32},
    )
    at = received_at or timezone.now()
    stored = inbound_store(provider=provider, inbound=parsed, received_at=at)
    assert stored.id is not None
    inbound_process_due(now=max(at, timezone.now()))
    return InboundMessage.objects.get(pk=stored.id)


def inbound_row(
    tenant: Tenant | None,
    *,
    body: str = "Yes, see you Tuesday",
    from_number: str = RECIPIENT,
    to_number: str = SENDER,
    state: str = InboundState.ROUTED,
    days_ago: float = 0,
    provider: str = "vonage",
    parts: int = 0,
    **fields,
) -> InboundMessage:
    """A stored inbound message at ``state``, received ``days_ago``; with ``parts``, joined from that many
    parts (their InboundPart rows too)."""
    at = timezone.now() - timedelta(days=days_ago)
    processed = state != InboundState.PENDING
    row = InboundMessage.objects.create(
        provider=provider,
        provider_message_id="id-" + secrets.token_hex(8),
        tenant=tenant,
        from_number=from_number,
        to_number=to_number,
        body=body,
        state=state,
        conversation=f"{to_number}:{from_number}" if processed else "",
        payload={"msisdn": from_number.lstrip("+"), "api-key": "abc"},
        parts=parts,
        segments=max(parts, 1),
        received_at=at,
        processed_at=at if processed else None,
        next_try_at=at,
        **fields,
    )
    for n in range(1, parts + 1):
        InboundPart.objects.create(
            provider=provider,
            provider_message_id=f"{row.provider_message_id}-{n}",
            from_number=from_number,
            to_number=to_number,
            concat_ref="ab",
            total=parts,
            part=n,
            body=body[n - 1 :: parts],
            payload={"msisdn": from_number.lstrip("+")},
            received_at=at,
            message=row,
        )
    return row
