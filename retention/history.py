"""Finished messages leave the operational tables for history (docs/retention.md, "History").

The sweep, the claim, the send worker and the receipt processor read ``Message`` and the rows hanging off
it; every row kept there for ever makes their indexes, vacuum and cache share grow with the gateway's
age. So a message final for ``HISTORY_AFTER_HOURS`` moves, with its timeline, attempts, receipt events,
webhook deliveries and duplicate-submission evidence, into one ``MessageHistory`` row (its document),
and its operational rows are deleted. The move of a batch is one transaction: a job killed at any point
leaves each message either wholly live or wholly in history, never both and never neither.

Not moved (yet): a message with a webhook delivery still pending (the outbox must finish it) or a receipt
event not yet processed; the next run takes it once they are done.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import Exists, OuterRef

from delivery.models import Attempt, DuplicateSubmission
from receipts.models import ReceiptEvent, WebhookDelivery, WebhookStatus
from retention import partitions
from retention.horizons import horizons_many
from retention.models import MessageHistory
from scheduling.models import TERMINAL_STATUSES, Message, MessageEvent

# The document's parts: its key, the model, and the column naming the message.
PARTS: tuple[tuple[str, type[models.Model], str], ...] = (
    ("events", MessageEvent, "message_id"),
    ("attempts", Attempt, "message_id"),
    ("receipts", ReceiptEvent, "message_id"),
    ("webhooks", WebhookDelivery, "message_id"),
    ("duplicates", DuplicateSubmission, "message_id"),
)
_FINISH_COLUMNS = ("delivered_at", "failed_at", "cancelled_at", "expired_at")


def plain(value: Any) -> Any:
    """A column's value as JSON can hold it (datetimes and dates as ISO text)."""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | memoryview):
        return None  # no binary column hangs off a message; never copy one blindly
    return value


def _attnames(model: type[models.Model]) -> list[str]:
    return [f.attname for f in model._meta.concrete_fields]


def finished_at(row: dict[str, Any]) -> dt.datetime:
    """When a final message became final: the time of its final status, else its last change."""
    times = [row[c] for c in _FINISH_COLUMNS if row.get(c)]
    return max(times) if times else row["updated_at"]


def _movable(now: dt.datetime) -> models.QuerySet[Message]:
    cutoff = now - dt.timedelta(hours=settings.HISTORY_AFTER_HOURS)
    pending_webhook = WebhookDelivery.objects.filter(message_id=OuterRef("pk"), status=WebhookStatus.PENDING)
    unprocessed = ReceiptEvent.objects.filter(message_id=OuterRef("pk"), processed_at__isnull=True)
    # msg_finished (updated_at WHERE status is final) serves the range; the two NOT EXISTS probe one index
    # each per candidate (webhook_by_message, receipt_by_message).
    return (
        Message.objects.filter(status__in=TERMINAL_STATUSES, updated_at__lt=cutoff)
        .exclude(Exists(pending_webhook))
        .exclude(Exists(unprocessed))
        .order_by("updated_at")
    )


def _document_parts(ids: list[int]) -> dict[int, dict[str, list[dict[str, Any]]]]:
    parts: dict[int, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: {key: [] for key, _, _ in PARTS})
    for key, model, column in PARTS:
        names = _attnames(model)
        for row in model._base_manager.filter(**{f"{column}__in": ids}).order_by(column, "pk").values(*names):
            parts[row[column]][key].append({k: plain(v) for k, v in row.items()})
    return parts


def history_row(
    row: dict[str, Any], parts: dict[str, list], *, now: dt.datetime, content_days: int, record_days: int
) -> MessageHistory:
    finished = finished_at(row)
    day = finished.astimezone(dt.UTC).date()
    return MessageHistory(
        id=row["id"],
        public_id=row["public_id"],
        tenant_id=row["tenant_id"],
        to=row["to"],
        from_number=row["from_number"],
        status=row["status"],
        reason_code=row["reason_code"],
        provider=row["provider"],
        provider_message_id=row["provider_message_id"],
        idempotency_key=row["idempotency_key"],
        campaign_id=row["campaign_id"],
        schedule_id=row["schedule_id"],
        created_at=row["created_at"],
        due_at=row["due_at"],
        sent_at=row["sent_at"],
        finished_at=finished,
        deleted=row["deleted_at"] is not None,
        moved_at=now,
        # The day after the horizon ends: a record kept "N days" is there for N whole days.
        purge_on=day + dt.timedelta(days=record_days + 1),
        redact_on=None if _content_gone(row) else day + dt.timedelta(days=content_days + 1),
        document={"message": {k: plain(v) for k, v in row.items()}, **parts},
    )


def _content_gone(row: dict[str, Any]) -> bool:
    # Redacted or deleted already (message_redact, message_delete, an erasure): nothing left to remove.
    return row["body"] == "" and (row["deleted_at"] is not None or "*" in row["to"])


def history_move_batch(*, now: dt.datetime, limit: int | None = None) -> dict[str, int]:
    """Move up to ``limit`` finished messages into history; the rows removed per table ({} when none)."""
    limit = limit or settings.RETENTION_BATCH_SIZE
    picked = list(_movable(now).values_list("id", "tenant_id", *_FINISH_COLUMNS, "updated_at")[:limit])
    if not picked:
        return {}
    horizons = horizons_many({p[1] for p in picked})
    # The partitions first, each in its own short transaction: never inside the move's.
    days = set()
    for _id, tenant_id, *times in picked:
        finished = finished_at(dict(zip((*_FINISH_COLUMNS, "updated_at"), times, strict=True)))
        days.add(finished.astimezone(dt.UTC).date() + dt.timedelta(days=horizons[tenant_id].record_days + 1))
    partitions.partitions_ensure(days)
    with transaction.atomic():
        # Locked and checked again inside the transaction: a message another run took, or that moved on
        # (a replay of a failed one), is left alone. SKIP LOCKED: two runs split the work, never wait.
        ids = list(
            _movable(now)
            .filter(id__in=[p[0] for p in picked])
            .select_for_update(skip_locked=True, of=("self",))
            .values_list("id", flat=True)
        )
        if not ids:
            return {}
        rows = list(Message._base_manager.filter(id__in=ids).values(*_attnames(Message)))
        parts = _document_parts(ids)
        history = []
        for row in rows:
            h = horizons[row["tenant_id"]]
            history.append(
                history_row(
                    row, parts[row["id"]], now=now, content_days=h.content_days, record_days=h.record_days
                )
            )
        partitions.partitions_ensure({h.purge_on for h in history} - days)  # a horizon changed meanwhile
        MessageHistory.objects.bulk_create(history)
        removed: dict[str, int] = {}
        # Receipt events and webhook deliveries outlive a deleted message (SET NULL): they are in the
        # document, so they go with it, not left behind holding its number.
        for model in (ReceiptEvent, WebhookDelivery):
            _n, counts = model._base_manager.filter(message_id__in=ids).delete()
            removed.update(counts)
        _n, counts = Message._base_manager.filter(id__in=ids).delete()
        removed.update(counts)
    return {"messages_moved": len(ids), **{_label(k): v for k, v in removed.items() if v}}


def _label(model_label: str) -> str:
    return model_label.split(".")[-1].lower()
