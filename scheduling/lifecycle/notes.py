"""Timeline entries that are not a status change (a note: a refused cancel, an attempt's evidence, a
receipt that moved nothing). A status change writes its own entry in its transaction
(scheduling.lifecycle.transitions, which names these too)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.utils import timezone

from scheduling.models import Message, MessageEvent
from smsgw import tracing


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
    traced = trace_ids_of([mid for mid, _, _, _ in entries])
    if traced:
        entries = [(m, k, s, {**d, "trace_id": traced[m]} if m in traced else d) for m, k, s, d in entries]
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


def trace_ids_of(message_ids: Sequence[int]) -> dict[int, str]:
    """The trace id of each of these messages that was born traced (smsgw.tracing), for its timeline
    entries' ``details.trace_id``. Tracing off: no query, nothing."""
    if not tracing.enabled() or not message_ids:
        return {}
    rows = Message.objects.filter(pk__in=list(message_ids)).exclude(trace_context="")
    return {mid: tracing.trace_id_of(tp) for mid, tp in rows.values_list("id", "trace_context")}


def details_traced(message_ids: Sequence[int], details):
    """``details`` (a dict, or a function of the message id) with each traced message's trace id added."""
    traced = trace_ids_of(message_ids)
    if not traced:
        return details

    def per_row(mid: int) -> dict:
        base = details(mid) if callable(details) else (details or {})
        return {**base, "trace_id": traced[mid]} if mid in traced else base

    return per_row
