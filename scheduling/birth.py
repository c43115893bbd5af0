"""The one way a batch of messages is born (STYLE.md "One way a message is born"): the schedule
materializer and campaigns both hand their rows here, so every such message gets the same insert, its
"created" event in the same statement, its daily-quota booking and, for a campaign, its progress count,
all in the caller's transaction.

A row is ``(message field values by attname, "created" event details)``; the details may be given
already encoded as JSON text (a campaign builds them from a shared prefix). Rows are inserted with
INSERT ... ON CONFLICT DO NOTHING: a row whose deterministic key is already there (a schedule's
occurrence key, a campaign recipient's key) is left untouched and reported as existing, so a re-run or
a resumed job never makes a second message. The single-message API (``services.message_create``) keeps
its own one-row statement (see ``services._message_insert``) but validates with the same helpers.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache

from django.db import connection
from django.db.models import JSONField

from scheduling import campaign_progress
from scheduling.models import Message, MessageEvent, Status
from smsgw.limits import quotas
from smsgw.models import Tenant

# Rows per INSERT statement: the arrays of one statement stay a few MB whatever the caller's batch, and
# a statement of this size costs far more in index work than in its round trip.
INSERT_BATCH = 2000


@dataclass
class Births:
    ids: list[int] = field(default_factory=list)  # the messages this call inserted
    existing: int = 0  # rows whose key was already there: nothing inserted for them
    inserted_public_ids: set[str] = field(default_factory=set, repr=False)


def messages_birth(
    rows: list[tuple[dict, dict]], *, actor: str, now: datetime, tenants: dict[int, Tenant]
) -> Births:
    """Insert ``rows`` (``status`` scheduled) with their "created" events, book the daily quota of the
    rows that went in and add campaign rows to their campaign's ``scheduled`` count. Call inside the
    caller's transaction: all of it commits or rolls back with the caller's other writes.

    Quota: every message made here is booked in the window of the day it is due, even beyond the
    quota: the schedule or campaign was accepted (and checked) as a whole, and a message due over the
    quota is deferred or failed at execution by the tenant's policy (limits.execution). It counts toward
    max_pending_scheduled like any pending message."""
    result = Births()
    for start in range(0, len(rows), INSERT_BATCH):
        chunk = rows[start : start + INSERT_BATCH]
        if connection.vendor == "postgresql":
            made = _insert_pg(chunk, actor, now)
        else:
            made = _insert_orm(chunk, actor, now)
        result.ids += [mid for mid, _ in made]
        result.inserted_public_ids.update(pid for _, pid in made)
    result.existing = len(rows) - len(result.ids)
    inserted = (
        [r for r, _ in rows if r["public_id"] in result.inserted_public_ids]
        if result.existing
        else [r for r, _ in rows]
    )
    _quota_book(inserted, tenants)
    _progress_add(inserted)
    return result


def _quota_book(inserted: list[dict], tenants: dict[int, Tenant]) -> None:
    by_tenant = {tid: t for tid, t in tenants.items() if t.daily_message_quota}
    if not inserted or not by_tenant:
        return
    quotas.bookings_add(
        (by_tenant[r["tenant_id"]], r["due_at"], r["segments"])
        for r in inserted
        if r["tenant_id"] in by_tenant
    )


def _progress_add(inserted: list[dict]) -> None:
    per_campaign = Counter(r["campaign_id"] for r in inserted if r.get("campaign_id"))
    campaign_progress.progress_add((cid, Status.SCHEDULED.value, n) for cid, n in per_campaign.items())


def _insert_orm(rows: list[tuple[dict, dict]], actor: str, now: datetime) -> list[tuple[int, str]]:
    # The inserted rows are found by their fresh random public ids, so a conflicting (pre-existing)
    # row is never mistaken for one of ours.
    Message.objects.bulk_create([Message(**row) for row, _ in rows], ignore_conflicts=True)
    by_public = {row["public_id"]: details for row, details in rows}
    found = list(Message.objects.filter(public_id__in=list(by_public)).values_list("id", "public_id"))
    MessageEvent.objects.bulk_create(
        [
            MessageEvent(
                message_id=mid,
                kind="created",
                from_status=Status.SCHEDULED,
                to_status=Status.SCHEDULED,
                actor=actor,
                details=json.loads(by_public[public_id])
                if isinstance(by_public[public_id], str)
                else by_public[public_id],
                created_at=now,
            )
            for mid, public_id in found
        ]
    )
    return found


def _fields(row_keys: frozenset[str]) -> list:
    """Every column the ORM would insert: values from the row, else the field's default; a column with
    only a database default is left to it."""
    return [
        f
        for f in Message._meta.concrete_fields
        if not f.primary_key and (f.attname in row_keys or not f.has_db_default())
    ]


@lru_cache(maxsize=64)
def _pg_insert_plan(row_keys: frozenset[str], constant: frozenset[str]) -> tuple[str, list]:
    """PostgreSQL: messages and their events in one statement. A column whose value differs between
    rows is passed as one array (unnest); a column with one value for the whole batch (a campaign's
    sender, tenant, due time, ...) as one scalar. The same statement text for any batch size, parsed
    once; no per-row ORM objects, and no per-row work for what the rows share (for a campaign, most
    columns: measured, half of the client's time was dumping array elements)."""
    qn = connection.ops.quote_name
    fields = _fields(row_keys)
    arrays, selects, names = [], [], []
    for i, f in enumerate(fields):
        json_column = isinstance(f, JSONField)
        db_type = "text" if json_column else f.db_type(connection)
        if f.attname in constant:
            value = f"%s::{db_type}"
        else:
            arrays.append(f"%s::{db_type}[]")
            names.append(f"c{i}")
            value = f"c{i}"
        selects.append(f"{value}::jsonb" if json_column else value)
    # Built from model metadata only; every value is a bound parameter.
    sql = (
        f"WITH m AS (INSERT INTO {qn(Message._meta.db_table)} ({', '.join(qn(f.column) for f in fields)}) "  # noqa: S608
        f"SELECT {', '.join(selects)} FROM unnest({', '.join(arrays)}) AS v({', '.join(names)}) "
        f"ON CONFLICT DO NOTHING RETURNING {qn('id')}, {qn('public_id')}), "
        f"e AS (INSERT INTO {qn(MessageEvent._meta.db_table)} "
        f'("message_id", "kind", "from_status", "to_status", "actor", "details", "created_at") '
        f"SELECT m.id, 'created', 'scheduled', 'scheduled', %s, d.details::jsonb, %s "
        f"FROM m JOIN unnest(%s::text[], %s::text[]) AS d(pid, details) ON d.pid = m.public_id) "
        f"SELECT m.id, m.public_id FROM m"
    )
    return sql, fields


def _json(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _insert_pg(rows: list[tuple[dict, dict | str]], actor: str, now: datetime) -> list[tuple[int, str]]:
    first = rows[0][0]
    # Parameters in statement order: the scalars (in the SELECT list), then the arrays (in unnest).
    scalars, columns, constant = [], [], set()
    for f in _fields(frozenset(first)):
        if f.attname not in first:
            constant.add(f.attname)
            value = f.get_default()
            scalars.append(json.dumps(value) if isinstance(f, JSONField) else value)
            continue
        values = [row[f.attname] for row, _ in rows]
        head = values[0]
        # Identity first: a campaign's rows share the very objects (metadata, due time, sender).
        if all(v is head or v == head for v in values) and f.attname != "public_id":
            constant.add(f.attname)
            scalars.append(json.dumps(head) if isinstance(f, JSONField) else head)
        else:
            columns.append([json.dumps(v) for v in values] if isinstance(f, JSONField) else values)
    sql, _ = _pg_insert_plan(frozenset(first), frozenset(constant))
    public_ids = [row["public_id"] for row, _ in rows]
    details = [_json(d) for _, d in rows]
    with server_bound_cursor() as cur:
        # %b: binary parameters, so psycopg dumps the arrays without escaping each element as text.
        cur.execute(sql.replace("%s", "%b"), [*scalars, *columns, actor, now, public_ids, details])
        return cur.fetchall()


def server_bound_cursor():
    """A cursor on the same connection and transaction that sends parameters separately (server-side
    binding) instead of Django's default client-side interpolation: dozens of arrays of thousands of
    values are then dumped natively, not escaped into the SQL text one element at a time (~3x less
    client CPU for a batch)."""
    import psycopg

    connection.ensure_connection()
    return psycopg.Cursor(connection.connection)
