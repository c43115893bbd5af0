"""Timeline entries that are not a status change (a note: a refused cancel, an attempt's evidence, a
receipt that moved nothing). A status change writes its own entry in its transaction
(scheduling.lifecycle.transitions, which names these too)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.utils import timezone

from scheduling.models import MessageEvent


def event_record(
    message_id: int, *, kind: str, actor: str = "system", details: dict | None = None, status: str = ""
) -> None:
    """Timeline entry without a status change (cancel_rejected, attempt notes, ...)."""
    events_record_many([(message_id, kind, status, details or {})], actor=actor)


def events_record_many(
    entries: Sequence[tuple[int, str, str, dict]], *, actor: str = "system", now: datetime | None = None
) -> None:
    """Timeline entries without a status change, in one insert: (message_id, kind, status, details)."""
    if not entries:
        return
    now = now or timezone.now()
    MessageEvent.objects.bulk_create(
        [
            MessageEvent(
                message_id=mid,
                kind=kind,
                from_status=status,
                to_status=status,
                actor=actor,
                details=details,
                created_at=now,
            )
            for mid, kind, status, details in entries
        ]
    )
