"""What a daily export holds (docs/exports.md): one tenant's messages that became final on one UTC day,
read from the operational table and from history (a day may straddle the move, retention.history), each
once, in id order, as the JSON lines the export file is made of.

Read in chunks by id, never as one list: a day of a large tenant is a million rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Case, DateTimeField, F, When
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from retention.models import MessageHistory
from scheduling.facade.names import SENDER_POOL_FIELD
from scheduling.models import TERMINAL_STATUSES, Message, Status
from smsgw.config.routes import leg_public
from smsgw.values.actors import reason_for_tenant

# Rows read from each table per query: one chunk of lines in memory at a time, and a query that stays
# an index walk over (tenant, id) of well under a second.
EXPORT_CHUNK = 1000

# Room for a pass that runs long, in deciding whether history can hold a day yet (history_may_hold).
MOVE_MARGIN = timedelta(hours=1)

# The column that holds each final status's time (scheduling.lifecycle.transitions.EDGES writes them);
# updated_at for a row that somehow lacks it.
FINISHED_AT: dict[str, str] = {
    Status.DELIVERED: "delivered_at",
    Status.UNDELIVERED: "failed_at",
    Status.FAILED: "failed_at",
    Status.CANCELLED: "cancelled_at",
    Status.EXPIRED: "expired_at",
}

# The message's columns an export line is made of (by attname, as history's document keeps them).
FIELDS = (
    "id",
    "public_id",
    "status",
    "status_reason",
    "reason_code",
    "error_code",
    "to",
    "body",
    "metadata",
    "encoding",
    "segments",
    "from_number",
    "sender_pool",
    "requested_send_at",
    "requested_timezone",
    "created_at",
    "due_at",
    "sent_at",
    "delivered_at",
    "provider",
    "provider_message_id",
    "provider_status",
    "route",
    "route_plan",
    "route_leg",
    "attempt_count",
    "deleted_at",
)
_TIMES = ("created_at", "due_at", "sent_at", "delivered_at", "deleted_at")


@dataclass(frozen=True)
class Finished:
    """One finished message as read from either table: its columns, its final time, and whether its
    content may still be shown (history says so with ``redact_on``; the live table has not redacted)."""

    id: int
    fields: dict[str, Any]
    finished_at: datetime
    content_kept: bool


def finished_at_expression() -> Case:
    """A live message's final time, as SQL."""
    return Case(
        *[
            When(status=status, then=Coalesce(F(column), F("updated_at")))
            for status, column in FINISHED_AT.items()
        ],
        default=F("updated_at"),
        output_field=DateTimeField(),
    )


def day_bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time.min, tzinfo=UTC)
    return start, start + timedelta(days=1)


def _live(tenant_id: int, start: datetime, end: datetime, after: int, limit: int) -> list[Finished]:
    rows = (
        Message.objects.filter(tenant_id=tenant_id, status__in=TERMINAL_STATUSES, id__gt=after)
        .annotate(finished=finished_at_expression())
        .filter(finished__gte=start, finished__lt=end)
        .order_by("id")
        .values(*FIELDS, "finished")[:limit]
    )
    out = []
    for row in rows:
        finished = row.pop("finished")
        out.append(Finished(id=row["id"], fields=row, finished_at=finished, content_kept=True))
    return out


def _when(value: Any) -> datetime | None:
    """A datetime from history's document (an ISO string) or the ORM; naive means UTC."""
    if value is None or value == "":
        return None
    parsed = value if isinstance(value, datetime) else parse_datetime(str(value))
    if parsed is not None and parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def _history(
    tenant_id: int, start: datetime, end: datetime, after: int, limit: int, today: date
) -> list[Finished]:
    rows = (
        MessageHistory.objects.filter(
            tenant_id=tenant_id, finished_at__gte=start, finished_at__lt=end, id__gt=after
        )
        .order_by("id")
        .values("id", "finished_at", "redact_on", "document")[:limit]
    )
    out = []
    for row in rows:
        message = dict((row["document"] or {}).get("message") or {})
        message["id"] = row["id"]
        for name in _TIMES:
            message[name] = _when(message.get(name))
        # Content is kept until redact_on; null once the retention job removed it.
        kept = row["redact_on"] is not None and today < row["redact_on"]
        out.append(Finished(id=row["id"], fields=message, finished_at=row["finished_at"], content_kept=kept))
    return out


def history_may_hold(day: date, *, now: datetime) -> bool:
    """Whether a message final on ``day`` can be in history yet. The move takes a message
    HISTORY_AFTER_HOURS after it is final, so yesterday's messages are all still live when yesterday is
    exported, and the history read is skipped: it walks the tenant's history by id (its index) and at
    millions of rows would cost seconds for nothing. Decided on the later of the pass's clock (which
    ``manage.py exports_run --now`` may set back) and the real one, with an hour's room for a long pass."""
    latest = max(now, timezone.now()) + MOVE_MARGIN
    return latest >= day_bounds(day)[0] + timedelta(hours=settings.HISTORY_AFTER_HOURS)


def finished_messages(
    *, tenant_id: int, day: date, now: datetime, chunk: int = EXPORT_CHUNK
) -> Iterator[Finished]:
    """The tenant's messages final on ``day``, each once, by id; deleted ones (the Twilio-compatible
    DELETE, gone from the tenant's view) left out.

    A message moves from the live table to history at any moment, in one transaction. Each step reads the
    live table first and history second, from the same id on: a message that moves in between is in both
    answers (kept once); one that moved before is in history's; none can be in neither. Only ids up to the
    smaller of the two chunks' last ids are taken in a step, so neither table runs ahead of the other."""
    start, end = day_bounds(day)
    read_history = history_may_hold(day, now=now)
    after = 0
    while True:
        live = _live(tenant_id, start, end, after, chunk)
        moved = _history(tenant_id, start, end, after, chunk, now.date()) if read_history else []
        full_ends = [rows[-1].id for rows in (live, moved) if len(rows) == chunk]
        bound = min(full_ends) if full_ends else None
        merged = {row.id: row for row in live}
        merged.update({row.id: row for row in moved})  # the newer copy of one read in both
        for message_id in sorted(merged):
            if bound is not None and message_id > bound:
                break
            row = merged[message_id]
            if row.fields.get("deleted_at") is None:
                yield row
        if bound is None:
            return
        after = bound


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _route(fields: dict[str, Any]) -> dict[str, Any]:
    """As the message API shows it (scheduling.messages.outputs): its rule, its legs, the leg it is on."""
    legs = [leg_public(leg) for leg in (fields.get("route_plan") or [])]
    if not legs:
        sender = fields.get("from_number") or fields.get("sender_pool") or ""
        legs = [{"provider": fields.get("provider") or "", "account": "", "sender": sender}]
    return {"name": fields.get("route") or "default", "leg": fields.get("route_leg") or 0, "legs": legs}


def export_line(row: Finished, *, content: bool) -> dict[str, Any]:
    """One line of an export. ``content``: the recipient's number, the body and the metadata are in it;
    otherwise they are null (past the tenant's content horizon, or already removed)."""
    f = row.fields
    return {
        "id": f.get("public_id"),
        "status": f.get("status"),
        "reason_code": f.get("reason_code") or "",
        "status_reason": reason_for_tenant(f.get("status_reason") or ""),
        "error_code": f.get("error_code") or "",
        "created_at": _iso(f.get("created_at")),
        "requested_send_at": f.get("requested_send_at") or None,
        "requested_timezone": f.get("requested_timezone") or None,
        "due_at": _iso(_when(f.get("due_at"))),
        "sent_at": _iso(f.get("sent_at")),
        "delivered_at": _iso(f.get("delivered_at")),
        "finished_at": _iso(row.finished_at),
        "provider": f.get("provider") or "",
        "provider_message_id": f.get("provider_message_id"),
        "provider_status": f.get("provider_status") or "",
        "route": _route(f),
        "from": f.get("from_number") or "",
        SENDER_POOL_FIELD: f.get("sender_pool") or "",
        "encoding": f.get("encoding") or "",
        "segments": f.get("segments"),
        "attempts": f.get("attempt_count"),
        "content": content,
        "to": f.get("to") if content else None,
        "body": f.get("body") if content else None,
        "metadata": (f.get("metadata") or {}) if content else None,
    }
