"""Inbound intake: store a verified inbound message (or one part of a long one) once, before the provider's
webhook is answered. Nothing else happens in the web request: inbound.process works it out from the
``inbound`` queue. A database outage spools it instead (inbound.spool); the provider's retry of a stored
one is a duplicate, dropped by the unique provider id."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from delivery.providers.base import InboundMessage as Parsed
from inbound.models import InboundMessage, InboundPart, InboundState, new_inbound_id
from smsgw.observability import events
from smsgw.runtime.db import fetchone_prepared


@dataclass(frozen=True)
class Stored:
    id: int | None
    duplicate: bool
    part: bool


# INSERT ... ON CONFLICT DO NOTHING RETURNING: one statement, and it tells a duplicate (no row) apart.
# Constant texts, so on PostgreSQL each is prepared once per connection (fetchone_prepared).
_MESSAGE = (
    f'INSERT INTO "{InboundMessage._meta.db_table}" ("public_id", "provider", "provider_message_id", '  # noqa: S608
    '"from_number", "to_number", "sender_pool", "body", "segments", "state", "keyword", "in_reply_to", '
    '"conversation", "action", "action_result", "needs_review", "payload", "parts", "parts_missing", '
    '"provider_sent_at", "received_at", "tries", "next_try_at") '
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, '', '', '', '', '{}', false, %s, 0, '[]', %s, %s, 0, %s) "
    'ON CONFLICT ("provider", "provider_message_id") DO NOTHING RETURNING "id"'
)
_PART = (
    f'INSERT INTO "{InboundPart._meta.db_table}" ("provider", "provider_message_id", "from_number", '  # noqa: S608
    '"to_number", "sender_pool", "concat_ref", "total", "part", "body", "payload", "provider_sent_at", '
    '"received_at") VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) '
    'ON CONFLICT ("provider", "provider_message_id") DO NOTHING RETURNING "id"'
)


def inbound_store(*, provider: str, inbound: Parsed, received_at: datetime) -> Stored:
    """Store one inbound message or part; ``received_at`` is when its webhook arrived (now, unless it
    waited in the spool)."""
    # The times as the ORM writes them (SQLite: UTC text without an offset). Passed raw, SQLite's driver
    # wrote "...+00:00", which then compared as text with the ORM's own form and sorted wrongly.
    adapt = connection.ops.adapt_datetimefield_value
    sent_at, received_at_db = adapt(inbound.sent_at), adapt(received_at)
    if inbound.concat_total:
        row = fetchone_prepared(
            _PART,
            [
                provider,
                inbound.message_id,
                inbound.from_number[:32],
                inbound.to_number[:32],
                inbound.sender_pool,
                inbound.concat_ref,
                inbound.concat_total,
                inbound.concat_part,
                inbound.body,
                json.dumps(inbound.payload),
                sent_at,
                received_at_db,
            ],
        )
    else:
        row = fetchone_prepared(
            _MESSAGE,
            [
                new_inbound_id(),
                provider,
                inbound.message_id,
                inbound.from_number[:32],
                inbound.to_number[:32],
                inbound.sender_pool,
                inbound.body,
                inbound.segments,
                InboundState.PENDING,
                json.dumps(inbound.payload),
                sent_at,
                received_at_db,
                received_at_db,
            ],
        )
    stored = Stored(id=row[0] if row else None, duplicate=row is None, part=bool(inbound.concat_total))
    events.inbound_received(provider, duplicate=stored.duplicate)
    return stored
