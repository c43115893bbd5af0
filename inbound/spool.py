"""Inbound messages whose webhook arrived while the database was unreachable: kept on local disk
(smsgw.runtime.file_spool) and answered as stored, so the provider does not hold them (Twilio would not
post them again after an answer) and a database outage loses none. ``spool_drain`` stores each with the
same INSERT ... ON CONFLICT as a live one, so one both spooled and retried by the provider is stored
once. The file holds the parsed message (its body too: it is what must not be lost), readable only by
the gateway's user (0600), and it is removed once stored."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from pathlib import Path

from django.conf import settings

from delivery.providers.base import InboundMessage as Parsed
from inbound.intake import inbound_store
from smsgw.runtime import file_spool

DRAIN_BATCH_SIZE = 500  # one INSERT each: a drain stays well under a second
FORMAT = 1


def spool_dir() -> Path:
    return Path(settings.INBOUND_SPOOL_DIR)


def inbound_spool(*, provider: str, inbound: Parsed, received_at: datetime) -> Path:
    """Write one inbound message durably; raises file_spool.SpoolUnavailable when it could not be."""
    fields = dataclasses.asdict(inbound)
    fields["sent_at"] = inbound.sent_at.isoformat() if inbound.sent_at else None
    record = {
        "format": FORMAT,
        "provider": provider,
        "received_at": received_at.isoformat(),
        "inbound": fields,
    }
    return file_spool.spool_write(spool_dir(), record, received_at, what="inbound")


def _store(record: dict) -> None:
    fields = dict(record["inbound"])
    fields["sent_at"] = datetime.fromisoformat(fields["sent_at"]) if fields.get("sent_at") else None
    received_at = datetime.fromisoformat(record["received_at"])
    inbound_store(provider=record["provider"], inbound=Parsed(**fields), received_at=received_at)


def spool_drain(*, limit: int = DRAIN_BATCH_SIZE) -> int:
    return file_spool.spool_drain(spool_dir(), _store, limit=limit, what="inbound")


spool_drain_from_web = file_spool.WebDrain(lambda limit: spool_drain(limit=limit))
