"""History read back for the tenant APIs (smsgw.stages.HistoryReader, filled by config.wiring): a moved
message is rebuilt from its document as an unsaved ``Message`` (the serializers of the REST API and the
Twilio-compatible API take it as they take a live one), its timeline as unsaved ``MessageEvent`` rows.

A read by public id probes ``hist_public_id`` in every partition (one small index probe each: a year of
daily partitions is a few milliseconds), and only after the live table had no such message; lists read
``hist_tenant_recent``, merged newest first with the live table by id."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Field
from django.utils import timezone

from retention.content import history_content_remove
from retention.models import MessageHistory, RetentionAction, RetentionAudit
from scheduling.models import Message, MessageEvent


def _fields(model: type[Message] | type[MessageEvent], data: dict[str, Any]) -> dict[str, Any]:
    values = {}
    for f in model._meta.concrete_fields:
        if f.attname in data:
            field: Field = f
            values[f.attname] = field.to_python(data[f.attname])
    return values


def _message(row: MessageHistory) -> Message:
    message = Message(**_fields(Message, row.document.get("message", {})))
    message._state.adding = False
    message.to = row.to  # the column is the one kept up to date by redaction and erasure
    message.history_events = [  # type: ignore[attr-defined]
        MessageEvent(**_fields(MessageEvent, e)) for e in row.document.get("events", [])
    ]
    return message


def message(*, tenant_id: int, public_id: str) -> Message | None:
    row = MessageHistory.objects.filter(tenant_id=tenant_id, public_id=public_id, deleted=False).first()
    return _message(row) if row else None


def page(
    *, tenant_id: int, lookups: dict[str, Any], before: int | None, after: int | None, limit: int
) -> list[Message]:
    qs = MessageHistory.objects.filter(tenant_id=tenant_id, deleted=False, **lookups)
    if after is not None:
        qs = qs.filter(id__gt=after).order_by("id")
    else:
        qs = qs.order_by("-id")
        if before is not None:
            qs = qs.filter(id__lt=before)
    return [_message(row) for row in qs[:limit]]


def delete(*, tenant_id: int, public_id: str, actor: str) -> bool:
    now = timezone.now()
    with transaction.atomic():
        row = (
            MessageHistory.objects.select_for_update()
            .filter(tenant_id=tenant_id, public_id=public_id, deleted=False)
            .values("pk")
            .first()
        )
        if row is None:
            return False
        counts = history_content_remove(ids=[row["pk"]], now=now, actor=actor)
        MessageHistory.objects.filter(pk=row["pk"]).update(deleted=True)
        RetentionAudit.objects.create(
            tenant_id=tenant_id,
            action=RetentionAction.REDACT,
            actor=actor[:200],
            subject=public_id,
            counts={**counts, "deleted": 1},
            created_at=now,
        )
    return True
