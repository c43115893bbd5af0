"""Receipt intake: validate, redact, de-duplicate and store a provider callback. Nothing else happens in
the web request; the status processor applies it from the `receipts` queue."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from django.db import connection
from django.utils import timezone

from delivery.providers import get_adapter
from receipts.models import ReceiptEvent, ReceiptOutcome
from scheduling.phone import mask

# Fields that carry numbers or content: masked or dropped before anything is stored.
NUMBER_FIELDS = ("To", "From", "Called", "Caller")
DROPPED_FIELDS = ("Body",)


class ReceiptInvalid(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Ingested:
    receipt_id: int | None
    duplicate: bool


def redact(params: dict[str, str]) -> dict[str, str]:
    out = {}
    for key, value in params.items():
        if key in DROPPED_FIELDS:
            continue
        out[key] = mask(value) if key in NUMBER_FIELDS else value[:200]
    return out


def receipt_ingest(*, provider: str, params: dict[str, str]) -> Ingested:
    sid = params.get("MessageSid") or params.get("SmsSid") or ""
    raw_status = params.get("MessageStatus") or params.get("SmsStatus") or ""
    if not sid or len(sid) > 64:
        raise ReceiptInvalid("MessageSid", "missing or too long")
    if not raw_status or len(raw_status) > 32:
        raise ReceiptInvalid("MessageStatus", "missing or too long")
    error_code = (params.get("ErrorCode") or "")[:32]
    adapter = get_adapter()
    normalized = adapter.normalize_status(raw_status.lower())
    dedupe = hashlib.sha256(f"{provider}|{sid}|{raw_status.lower()}|{error_code}".encode()).hexdigest()
    now = timezone.now()
    # INSERT ... ON CONFLICT DO NOTHING RETURNING: one statement, and it tells a duplicate (no row) apart.
    table = ReceiptEvent._meta.db_table
    with connection.cursor() as cur:
        cur.execute(
            f'INSERT INTO "{table}" ("provider", "provider_message_id", "raw_status", "normalized_status", '  # noqa: S608
            f'"error_code", "payload", "dedupe_key", "received_at", "next_try_at", "tries", "outcome") '
            f"VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 0, %s) "
            f'ON CONFLICT ("dedupe_key") DO NOTHING RETURNING "id"',
            [
                provider,
                sid,
                raw_status,
                normalized,
                error_code,
                json.dumps(redact(params)),
                dedupe,
                now,
                now,
                ReceiptOutcome.PENDING,
            ],
        )
        row = cur.fetchone()
    return Ingested(receipt_id=row[0] if row else None, duplicate=row is None)
