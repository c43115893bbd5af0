"""Inbound messages at the horizons (docs/retention.md, "What goes when"; docs/inbound.md, "Retention and
erasure"): what a recipient sent back is the person's content, under its tenant's horizons like the
messages sent to them. Counted from when it reached us (``received_at``):

- at the content horizon, a processed inbound message (routed, or unrouted: those have no tenant and
  follow the defaults) loses its body and its contact's full number, and so do the parts it was joined
  from (retention.content); its ``message.received`` webhook deliveries, created when it was processed,
  lose the same from their payloads;
- at the record horizon its row goes, its parts with it (their foreign key cascades). Its webhook
  deliveries go with the message they name (to history, then pruned), or, naming none, with the strays
  (retention.prune) at the default record horizon.

A pending one (stored, not processed yet) is never touched: the processor still needs it. Each pass reads
one partial index (inbound_content_held, inbound_processed) in bounded batches, so a run costs what is
due; the webhook pass reads the deliveries of that event type created before the horizon that still
quote a full number (no index of its own: like the strays, bounded by the batch)."""

from __future__ import annotations

import datetime as dt
from collections import Counter

from django.conf import settings
from django.db.models import TextField
from django.db.models.fields.json import KT
from django.db.models.functions import Cast

from inbound.models import InboundMessage, InboundState
from receipts.models import WebhookDelivery
from receipts.webhooks import INBOUND_EVENT
from retention.content import inbound_content_remove, inbound_webhooks_scrub
from retention.definitions import horizon_groups


def inbound_content_due(*, now: dt.datetime, limit: int | None = None) -> dict[str, int]:
    """Processed inbound messages past their tenant's content horizon that still hold content, and the
    message.received deliveries of that age that still do."""
    limit = limit or settings.RETENTION_BATCH_SIZE
    done: Counter[str] = Counter()
    for days, scope in horizon_groups("content_days"):
        cutoff = now - dt.timedelta(days=days)
        ids = list(
            InboundMessage.objects.filter(scope, received_at__lt=cutoff)
            .exclude(state=InboundState.PENDING)
            .exclude(from_number__contains="*")
            .exclude(from_number="", body="")  # nothing left to remove (an empty sender, an empty text)
            .order_by("received_at")
            .values_list("id", flat=True)[:limit]
        )
        if ids:
            done.update(inbound_content_remove(inbound_ids=ids))
        hooks = list(
            WebhookDelivery.objects.filter(scope, event_type=INBOUND_EVENT, created_at__lt=cutoff)
            # As text: a lookup on the JSON key itself would compare JSON values (SQLite decodes the "").
            .annotate(contact=Cast(KT("payload__data__from"), TextField()))
            .filter(contact__gt="")
            .exclude(contact__contains="*")
            .order_by("id")
            .values_list("id", flat=True)[:limit]
        )
        if hooks:
            done.update(inbound_webhooks_scrub(delivery_ids=hooks))
    return {k: v for k, v in done.items() if v}


def inbound_prune(*, now: dt.datetime, limit: int | None = None) -> dict[str, int]:
    """Processed inbound messages past their tenant's record horizon, with their parts."""
    limit = limit or settings.RETENTION_BATCH_SIZE
    done: Counter[str] = Counter()
    for days, scope in horizon_groups("record_days"):
        ids = list(
            InboundMessage.objects.filter(scope, received_at__lt=now - dt.timedelta(days=days))
            .exclude(state=InboundState.PENDING)
            .order_by("received_at")
            .values_list("id", flat=True)[:limit]
        )
        if ids:
            _n, counts = InboundMessage.objects.filter(id__in=ids).delete()
            done.update({label.split(".")[-1].lower(): n for label, n in counts.items()})
    return {k: v for k, v in done.items() if v}
