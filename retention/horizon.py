"""The content horizon over messages (docs/retention.md, "The two horizons"): a final message whose
tenant's content horizon has passed loses its body, full number and metadata, in the live table and in
history, through the one definition of what removing content means (retention.content)."""

from __future__ import annotations

import datetime as dt
from collections import Counter

from django.conf import settings

from retention.content import history_content_remove, messages_content_remove
from retention.definitions import horizon_groups
from retention.models import MessageHistory
from scheduling.models import TERMINAL_STATUSES, Message


def messages_content_due(*, now: dt.datetime, limit: int | None = None) -> dict[str, int]:
    """Live final messages past their tenant's content horizon that still hold content."""
    limit = limit or settings.RETENTION_BATCH_SIZE
    done: Counter[str] = Counter()
    for days, scope in horizon_groups("content_days"):
        # msg_finished (updated_at WHERE final) serves the range; a scrubbed message (no body, a masked
        # number) is left out, so a run costs what is due, not what was done before.
        ids = list(
            Message.objects.filter(
                scope, status__in=TERMINAL_STATUSES, updated_at__lt=now - dt.timedelta(days=days)
            )
            .exclude(body="", to__contains="*")
            .order_by("updated_at")
            .values_list("id", flat=True)[:limit]
        )
        if ids:
            done.update(messages_content_remove(message_ids=ids, now=now))
    return {k: v for k, v in done.items() if v}


def history_content_due(*, now: dt.datetime, limit: int | None = None) -> dict[str, int]:
    """History rows whose redaction day has come (hist_redact_due)."""
    limit = limit or settings.RETENTION_BATCH_SIZE
    today = now.astimezone(dt.UTC).date()
    ids = list(MessageHistory.objects.filter(redact_on__lte=today).values_list("id", flat=True)[:limit])
    if not ids:
        return {}
    # Every row it is given leaves the index (its redaction day is emptied), so the passes end.
    return history_content_remove(ids=ids, now=now)
