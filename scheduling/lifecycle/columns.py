"""The columns a status change may set and return (``SETTABLE``, ``RETURNABLE``: guarding the names keeps
the raw SQL of scheduling.lifecycle.transitions injection-proof), their SQL, and a raw cursor's rows read
back as the ORM would give them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC
from typing import Any

from django.db import connection
from django.db.models import DateTimeField, Field, JSONField
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from scheduling.lifecycle.reasons import REASON_CODES
from scheduling.models import Message

# Columns a transition may set besides status/version. Guarding the names keeps raw SQL injection-proof.
SETTABLE = frozenset(
    {
        "run_after",
        "status_reason",
        "reason_code",
        "queued_at",
        "published_at",
        "sending_at",
        "sent_at",
        "delivered_at",
        "failed_at",
        "cancelled_at",
        "expired_at",
        "provider",
        "provider_message_id",
        "provider_status",
        "error_code",
        "attempt_count",
        "provider_calls",
        "due_at",
        "expires_at",
        "body",
        "to",
        "encoding",
        "segments",
        "priority",
        "metadata",
        "uncertain_wait_seconds",
        "requested_send_at",
        "requested_local_time",
        "requested_timezone",
        "dst_policy",
        "dst_adjustment",
        "from_number",
        "sender_pool",
        "quiet_deferred_from",  # quiet hours: the due time before a move into the window's end
        "quiet_start",  # quiet hours: the window copied onto the message (reschedule re-applies it)
        "quiet_end",
        "quiet_timezone",
        "route_leg",  # a failover moves a message to its route's next leg (delivery.routing.failover)
        # A failed message's route taken again by today's rules (scheduling.messages.corrections).
        "route",
        "route_plan",
    }
)
RETURNABLE = SETTABLE | {
    "route",
    "route_plan",
    "id",
    "public_id",
    "version",
    "status",
    "expires_at",
    "tenant_id",
    "created_at",
    "campaign_id",
    "trace_context",  # the send batch's spans link to each claimed message's trace (smsgw.tracing)
}


def reason_check(code: str) -> None:
    """A reason code is one of ReasonCode's (or none): a misspelt one would be a message nobody's filter
    or report ever finds."""
    if code not in REASON_CODES:
        raise ValueError(f"not a ReasonCode: {code!r}")


def settable_check(set_fields: dict[str, Any]) -> None:
    unknown = set(set_fields) - SETTABLE
    if unknown:
        raise ValueError(f"not settable by a transition: {sorted(unknown)}")
    reason_check(set_fields.get("reason_code", ""))


def field_of(name: str) -> Field:
    """A Message column's field (get_field also finds reverse relations; these names are never one)."""
    field = Message._meta.get_field(name)
    assert isinstance(field, Field)
    return field


def set_clause(set_fields: dict[str, Any]) -> tuple[str, list[Any]]:
    settable_check(set_fields)
    parts, params = [], []
    for column, value in set_fields.items():
        field = field_of(column)
        parts.append(f'"{field.column}" = %s')
        params.append(field.get_db_prep_save(value, connection))
    return (", " + ", ".join(parts)) if parts else "", params


def returning_clause(columns: Sequence[str]) -> str:
    unknown = set(columns) - RETURNABLE
    if unknown:
        raise ValueError(f"not returnable: {sorted(unknown)}")
    return ", ".join(f'"{field_of(c).column}"' for c in columns)


def rows_from(cursor, columns: Sequence[str]) -> list[dict[str, Any]]:
    """A raw cursor's rows of Message columns as dicts, values as the ORM would give them."""
    out = []
    fields = [Message._meta.get_field(c) for c in columns]
    sqlite = connection.vendor == "sqlite"
    # Django has psycopg return jsonb as text (JSONField.from_db_value decodes it): a raw cursor gets the
    # text, decoded here as the ORM would.
    json_columns = {i for i, field in enumerate(fields) if isinstance(field, JSONField)}
    for raw in cursor.fetchall():
        row = {}
        for i, (name, field, value) in enumerate(zip(columns, fields, raw, strict=True)):
            if sqlite and value is not None:
                value = _sqlite_value(field, value)
            elif i in json_columns and isinstance(value, str):
                value = json.loads(value)
            row[name] = value
        out.append(row)
    return out


def _sqlite_value(field, value):
    # Raw cursors on SQLite return naive datetimes (or text) and JSON as text; normalise to what the ORM
    # would give, since USE_TZ stores UTC there.
    if isinstance(field, DateTimeField):
        if isinstance(value, str):
            value = parse_datetime(value)
        if value is not None and timezone.is_naive(value):
            value = timezone.make_aware(value, UTC)
        return value
    if isinstance(field, JSONField) and isinstance(value, str):
        return json.loads(value)
    return value
