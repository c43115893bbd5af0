"""The receipt spool: signed callbacks that arrived while the database was unreachable, kept on local disk
until they can be stored (the folder's mechanics: smsgw.runtime.file_spool).

Twilio does not retry a status callback that got an answer, 5xx included: by default only a connection
that could not be made is retried, once (twilio.com/docs/usage/webhooks/webhooks-connection-overrides,
``rc``/``rp=ct``). A 500 during a database outage therefore lost the receipt for good, and its message
stayed ``sent``. Instead the endpoint writes the parsed, redacted callback here and answers as usual;
``spool_drain`` stores each file with the same INSERT ... ON CONFLICT as a live callback.

The file holds what the ReceiptEvent would hold (numbers masked, no body), never the raw request.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from django.conf import settings

from delivery.providers.base import CallbackData
from receipts.ingest import receipt_ingest
from smsgw.http import unavailable
from smsgw.runtime import file_spool
from smsgw.runtime.file_spool import SpoolUnavailable

__all__ = ["DB_UNAVAILABLE", "SpoolUnavailable", "connection_drop", "receipt_spool", "spool_drain"]

# Bounded so one drain stays well under a second (one INSERT each) even after a long outage; the next
# run takes the next batch.
DRAIN_BATCH_SIZE = 500
DB_UNAVAILABLE = unavailable.DB_UNAVAILABLE
connection_drop = unavailable.connection_drop
FORMAT = 1


def spool_dir() -> Path:
    return Path(settings.RECEIPT_SPOOL_DIR)


def _record(provider: str, callback: CallbackData, received_at: datetime) -> dict:
    return {
        "format": FORMAT,
        "provider": provider,
        "provider_message_id": callback.provider_message_id,
        "raw_status": callback.raw_status,
        "normalized_status": callback.normalized_status,
        "error_code": callback.error_code,
        "done_at": callback.done_at.isoformat() if callback.done_at else None,
        "message_hint": callback.message_hint,
        "attempt_hint": callback.attempt_hint,
        "payload": callback.payload,
        "received_at": received_at.isoformat(),
    }


def _store(record: dict) -> None:
    done_at = record["done_at"]
    callback = CallbackData(
        provider_message_id=record["provider_message_id"],
        raw_status=record["raw_status"],
        normalized_status=record["normalized_status"],
        error_code=record["error_code"],
        done_at=datetime.fromisoformat(done_at) if done_at else None,
        message_hint=record["message_hint"],
        attempt_hint=record["attempt_hint"],
        payload=record["payload"],
    )
    received_at = datetime.fromisoformat(record["received_at"])
    receipt_ingest(provider=record["provider"], callback=callback, received_at=received_at)


def receipt_spool(*, provider: str, callback: CallbackData, received_at: datetime) -> Path:
    """Write one callback durably; raises SpoolUnavailable when it could not be."""
    record = _record(provider, callback, received_at)
    return file_spool.spool_write(spool_dir(), record, received_at, what="receipt")


def spool_drain(*, limit: int = DRAIN_BATCH_SIZE) -> int:
    """Store up to ``limit`` spooled callbacks, oldest first; returns how many files were taken off the
    spool (smsgw.runtime.file_spool.spool_drain)."""
    return file_spool.spool_drain(spool_dir(), _store, limit=limit, what="receipt")


# In a request, after the callback itself was stored: at most once a second, 50 files.
spool_drain_from_web = file_spool.WebDrain(lambda limit: spool_drain(limit=limit))
