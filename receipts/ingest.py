"""Receipt intake: store a validated provider callback, parsed and redacted by its adapter, once. Nothing
else happens in the web request; the status processor applies it from the `receipts` queue."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.utils import timezone

from delivery.providers.base import CallbackData
from receipts.models import ReceiptEvent, ReceiptOutcome
from smsgw import tracing
from smsgw.runtime.db import fetchone_prepared


@dataclass(frozen=True)
class Ingested:
    receipt_id: int | None
    duplicate: bool


def receipt_dedupe_key(*, provider: str, callback: CallbackData) -> str:
    raw_status = callback.raw_status.lower()
    sid = callback.provider_message_id
    return hashlib.sha256(f"{provider}|{sid}|{raw_status}|{callback.error_code}".encode()).hexdigest()


# INSERT ... ON CONFLICT DO NOTHING RETURNING: one statement, and it tells a duplicate (no row) apart.
# Built once: the same text every call is also the prepared statement's key.
_INSERT = (
    f'INSERT INTO "{ReceiptEvent._meta.db_table}" ("provider", "provider_message_id", "raw_status", '  # noqa: S608
    '"normalized_status", "error_code", "payload", "dedupe_key", "received_at", "next_try_at", "tries", '
    '"outcome", "done_at", "message_hint", "attempt_hint") '
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 0, %s, %s, %s, %s) "
    'ON CONFLICT ("dedupe_key") DO NOTHING RETURNING "id"'
)


def receipt_ingest(*, provider: str, callback: CallbackData, received_at: datetime | None = None) -> Ingested:
    """``received_at`` is when the callback arrived (now, unless it waited in the spool)."""
    now = timezone.now()
    received_at = received_at or now
    # The times as the ORM writes them (SQLite: UTC text without an offset; raw, its driver wrote
    # "...+00:00", which compares as text with the ORM's form and sorts wrongly within a second).
    adapt = connection.ops.adapt_datetimefield_value
    # A prepared statement on PostgreSQL (smsgw.runtime.db.fetchone_prepared): this runs once per callback.
    row = fetchone_prepared(
        _INSERT,
        [
            provider,
            callback.provider_message_id,
            callback.raw_status,
            callback.normalized_status,
            callback.error_code,
            json.dumps(callback.payload),
            receipt_dedupe_key(provider=provider, callback=callback),
            adapt(received_at),
            adapt(now),
            ReceiptOutcome.PENDING,
            adapt(callback.done_at),
            callback.message_hint,
            callback.attempt_hint,
        ],
    )
    # The callback request's span (smsgw.tracing.web) names the provider's reference and the status, as
    # the provider request's span and the receipt batch's do: a trace search by the reference finds all.
    tracing.current_attribute("smsgw.provider_message_id", callback.provider_message_id or "")
    tracing.current_attribute("smsgw.provider_status", callback.normalized_status or callback.raw_status[:32])
    return Ingested(receipt_id=row[0] if row else None, duplicate=row is None)
