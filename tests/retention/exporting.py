"""Test data for the export tests: messages final at a chosen time, in the live table or moved to history
as the retention job moves them (retention.models.MessageHistory's document), and a read of an export."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, date, datetime, timedelta

from django.core.files.storage import storages
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection

from retention.models import Export, MessageHistory
from retention.partitions import partitions_ensure
from scheduling.models import Message, Status
from smsgw.models import Tenant
from tests.factories import RECIPIENT, message

DAY = date(2026, 12, 4)
# The run's clock: the morning after DAY (its export is due an hour after midnight).
NOW = datetime(2026, 12, 5, 6, 0, tzinfo=UTC)


def at(day: date, hour: int, minute: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


_STAMP = {
    Status.DELIVERED: "delivered_at",
    Status.UNDELIVERED: "failed_at",
    Status.FAILED: "failed_at",
    Status.CANCELLED: "cancelled_at",
    Status.EXPIRED: "expired_at",
}


def finished(
    tenant: Tenant,
    when: datetime,
    *,
    status: str = Status.DELIVERED,
    to: str = RECIPIENT,
    body: str = "hello",
    sid: str | None = None,
) -> Message:
    """A message in the live table that became ``status`` at ``when`` (sent a minute before)."""
    msg = message(tenant, to=to, body=body)
    fields = {
        "status": status,
        "created_at": when - timedelta(hours=1),
        "due_at": when - timedelta(minutes=2),
        "updated_at": when,
        "run_after": None,
        _STAMP[status]: when,
        "attempt_count": 1,
        "metadata": {"order": "A-1"},
    }
    if status in (Status.DELIVERED, Status.UNDELIVERED):
        fields |= {
            "sent_at": when - timedelta(minutes=1),
            "provider_message_id": sid or f"SM{msg.pk:032d}",
            "provider_status": status,
        }
    if status == Status.UNDELIVERED:
        fields["error_code"] = "30003"
    Message.objects.filter(pk=msg.pk).update(**fields)
    msg.refresh_from_db()
    return msg


def move_to_history(msg: Message, *, redact_on: date | None, record_days: int = 365) -> MessageHistory:
    """Move a finished message to history as the retention job does: one row holding its columns as a
    document, and the live row gone. ``redact_on`` None: its content was removed already."""
    msg.refresh_from_db()
    values = {f.attname: getattr(msg, f.attname) for f in Message._meta.concrete_fields}
    document = {
        "message": json.loads(json.dumps(values, cls=DjangoJSONEncoder)),
        "events": [],
        "attempts": [],
        "receipts": [],
        "webhooks": [],
    }
    finished_at = msg.delivered_at or msg.failed_at or msg.cancelled_at or msg.expired_at or msg.updated_at
    purge_on = finished_at.date() + timedelta(days=record_days)
    partitions_ensure({purge_on})
    row = MessageHistory.objects.create(
        id=msg.pk,
        public_id=msg.public_id,
        tenant_id=msg.tenant_id,
        to=msg.to if redact_on else "+1415555****",
        status=msg.status,
        provider=msg.provider,
        provider_message_id=msg.provider_message_id,
        idempotency_key=msg.idempotency_key,
        campaign_id=msg.campaign_id,
        schedule_id=msg.schedule_id,
        created_at=msg.created_at,
        finished_at=finished_at,
        moved_at=finished_at + timedelta(hours=48),
        purge_on=purge_on,
        redact_on=redact_on,
        document=document,
    )
    Message.objects.filter(pk=msg.pk).delete()
    return row


def lines_of(export: Export) -> list[dict]:
    with storages["exports"].open(export.name, "rb") as f:
        raw = gzip.decompress(f.read())
    return [json.loads(line) for line in raw.decode().splitlines()]


def files_in_storage() -> list[str]:
    """Every file in the export storage (a local folder in the tests), as storage names."""
    storage = storages["exports"]
    found: list[str] = []

    def walk(folder: str) -> None:
        try:
            dirs, files = storage.listdir(folder)
        except FileNotFoundError:
            return
        found.extend(f"{folder}/{name}" if folder else name for name in files)
        for d in dirs:
            walk(f"{folder}/{d}" if folder else d)

    walk("")
    return sorted(found)


def is_postgres() -> bool:
    return connection.vendor == "postgresql"
