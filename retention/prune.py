"""The record horizon: what is past it goes (docs/retention.md, "Pruning").

On PostgreSQL history is partitioned by purge day, so a day's records go with one ``DETACH`` and one
``DROP`` of its partition, whatever it holds (retention.partitions); elsewhere (SQLite, embedded mode) a
batched DELETE. Receipt events that never found their message (orphans) and webhook deliveries whose
message has gone are not in any partition: they go in bounded batches once older than the default record
horizon.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings

from receipts.models import ReceiptEvent, WebhookDelivery, WebhookStatus
from retention import partitions
from retention.models import MessageHistory


def history_prune(*, now: dt.datetime, limit: int | None = None) -> dict[str, int]:
    """Remove every history record whose purge day has come; the rows (or partitions) removed."""
    today = now.astimezone(dt.UTC).date()
    if partitions.partitioned():
        dropped = [day for day in partitions.partitions_existing() if day <= today]
        rows = 0
        for day in dropped:
            rows += _partition_rows(day)
            partitions.partition_drop(day)
        return {"history_partitions_dropped": len(dropped), "messagehistory": rows} if dropped else {}
    limit = limit or settings.RETENTION_BATCH_SIZE
    ids = list(MessageHistory.objects.filter(purge_on__lte=today).values_list("id", flat=True)[:limit])
    if not ids:
        return {}
    deleted, _ = MessageHistory.objects.filter(id__in=ids).delete()
    return {"messagehistory": deleted}


def _partition_rows(day: dt.date) -> int:
    # The planner's estimate (pg_class.reltuples, kept by autovacuum/ANALYZE): a count(*) would read the
    # whole partition, the cost the partitions exist to avoid. For the audit trail, not for billing.
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE relname = %s", [partitions.partition_name(day)]
        )
        row = cur.fetchone()
    return max(int(row[0]), 0) if row else 0


def strays_prune(*, now: dt.datetime, limit: int | None = None) -> dict[str, int]:
    """Orphaned receipt events and message-less webhook deliveries past the default record horizon."""
    limit = limit or settings.RETENTION_BATCH_SIZE
    cutoff = now - dt.timedelta(days=settings.RETENTION_RECORD_DAYS)
    done: dict[str, int] = {}
    receipts = list(
        ReceiptEvent.objects.filter(
            message__isnull=True, processed_at__isnull=False, received_at__lt=cutoff
        ).values_list("id", flat=True)[:limit]
    )
    if receipts:
        done["receiptevent"], _ = ReceiptEvent.objects.filter(id__in=receipts).delete()
    hooks = list(
        WebhookDelivery.objects.filter(message__isnull=True, created_at__lt=cutoff)
        .exclude(status=WebhookStatus.PENDING)
        .values_list("id", flat=True)[:limit]
    )
    if hooks:
        done["webhookdelivery"], _ = WebhookDelivery.objects.filter(id__in=hooks).delete()
    return done
