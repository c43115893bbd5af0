"""The one way a message is born, one or many: the tenant API (one message), the schedule materializer
and campaigns all hand their rows here, so every message gets the same insert, its "created" event in
the same statement, its quota booking and, for a campaign, its progress count, all in the caller's
transaction.

A row is ``(message field values by attname, "created" event details)``; the details may be given
already encoded as JSON text (a campaign builds them from a shared prefix). The API's one message comes
as the unsaved ``Message`` itself and goes in by one short statement (``_insert_one``); batches by one
statement per INSERT_BATCH rows. Either way rows are inserted with INSERT ... ON CONFLICT DO NOTHING: a
row whose key is already there (an Idempotency-Key, a schedule's occurrence key, a campaign recipient's
key) is left untouched and reported as existing, so a re-run, a resumed job or a repeated request never
makes a second message.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, lru_cache
from typing import cast

from django.db import IntegrityError, connection, connections, transaction
from django.db.models import JSONField

from scheduling.campaigns import progress as campaign_progress
from scheduling.limits import quotas
from scheduling.models import Message, MessageEvent, Status
from smsgw import stages, tracing
from smsgw.models import Tenant
from smsgw.runtime.db import fetchone_prepared, server_bound_cursor

# Rows per INSERT statement: the arrays of one statement stay a few MB whatever the caller's batch, and
# a statement of this size costs far more in index work than in its round trip.
INSERT_BATCH = 2000


@dataclass
class Births:
    ids: list[int] = field(default_factory=list)  # the messages this call inserted
    existing: int = 0  # rows whose key was already there: nothing inserted for them
    id_of: dict[str, int] = field(default_factory=dict, repr=False)  # public id -> id, of those inserted


Row = tuple[dict | Message, dict | str]
FACTS = ("public_id", "tenant_id", "due_at", "segments", "campaign_id")  # what the bookkeeping reads


def messages_birth(
    rows: Sequence[Row],
    *,
    actor: str,
    now: datetime,
    tenants: dict[int, Tenant],
    refuse_over_quota: bool = False,
) -> Births:
    """Insert ``rows`` (``status`` scheduled) with their "created" events, book the quota of the rows
    that went in and add campaign rows to their campaign's ``scheduled`` count. Call inside the
    caller's transaction: all of it commits or rolls back with the caller's other writes. A row given
    as a Message gets its primary key set when it went in.

    Quota: every message that went in is booked in the daily window of the day it is due
    (scheduling.limits.quotas) and counts toward max_pending_scheduled like any pending message.
    ``refuse_over_quota`` (a message the API accepts on its own): a message that does not fit either
    quota is refused with QuotaExceeded; the pending count is taken first, with the tenant's row
    locked, and a refused booking rolls the insert back with the caller's transaction. Otherwise (a
    schedule's occurrences, a campaign's recipients: accepted and checked as a whole) every message is
    booked, even beyond the quota, and one due over it is deferred or failed at execution by the
    tenant's policy (limits.execution)."""
    # Each row's route (provider, sender, the legs to fail over to): scheduling knows nothing of providers
    # or routes; the composition root hands it delivery's router (smsgw.stages).
    stages.router()(rows)
    rows = _traced(rows)
    facts = [_facts(r) for r, _ in rows]
    if refuse_over_quota:
        _pending_check(facts, tenants)
    result = Births()
    for start in range(0, len(rows), INSERT_BATCH):
        chunk = rows[start : start + INSERT_BATCH]
        if isinstance(chunk[0][0], Message):
            assert len(chunk) == 1, "a Message row is born on its own"
            made = _insert_one(chunk[0][0], chunk[0][1], actor, now)
        else:
            # The rows of a chunk whose first row is a dict are all dicts (a Message is born alone).
            dict_rows = cast("Sequence[tuple[dict, dict | str]]", chunk)
            if connection.vendor == "postgresql":
                made = _insert_pg(dict_rows, actor, now)
            else:
                made = _insert_orm(dict_rows, actor, now)
        result.ids += [mid for mid, _ in made]
        result.id_of.update((pid, mid) for mid, pid in made)
    result.existing = len(rows) - len(result.ids)
    inserted = [f for f in facts if f["public_id"] in result.id_of] if result.existing else facts
    _quota_book(inserted, tenants, now, refuse_over_quota)
    _progress_add(inserted)
    return result


def _traced(rows: Sequence[Row]) -> Sequence[Row]:
    """Born inside a traced request (or job): each message keeps the span's context, which the later
    spans link to, and its "created" entry names the trace (smsgw.tracing). Unchanged when tracing is off
    or the span is not sampled."""
    traceparent = tracing.traceparent_current()
    if not traceparent:
        return rows
    trace_id = tracing.trace_id_of(traceparent)
    traced: list[Row] = []
    for row, details in rows:
        if isinstance(row, Message):
            row.trace_context = row.trace_context or traceparent
        else:
            row.setdefault("trace_context", traceparent)
        traced.append((row, {**_details_dict(details), "trace_id": trace_id}))
    if len(rows) == 1 and isinstance(rows[0][0], Message):
        tracing.current_attribute("smsgw.message.id", rows[0][0].public_id)
    return traced


def _facts(row: dict | Message) -> dict:
    return row if isinstance(row, dict) else {name: getattr(row, name) for name in FACTS}


def _pending_check(facts: list[dict], tenants: dict[int, Tenant]) -> None:
    for tenant_id, n in sorted(Counter(f["tenant_id"] for f in facts).items()):
        tenant = tenants[tenant_id]
        if quotas.has_quota(tenant):
            assert transaction.get_connection().in_atomic_block, (
                "quotas are booked in the inserting transaction"
            )
            quotas.pending_check(tenant=tenant, adding=n)


def _quota_book(inserted: list[dict], tenants: dict[int, Tenant], now: datetime, refuse: bool) -> None:
    by_tenant = {tid: t for tid, t in tenants.items() if t.daily_message_quota}
    if not inserted or not by_tenant:
        return
    items = [
        (by_tenant[r["tenant_id"]], r["due_at"], r["segments"])
        for r in inserted
        if r["tenant_id"] in by_tenant
    ]
    if refuse:
        for tenant, due_at, segments in items:
            quotas.daily_book(tenant=tenant, due_at=due_at, segments=segments, now=now)
    else:
        quotas.bookings_add(items)


def _progress_add(inserted: list[dict]) -> None:
    per_campaign = Counter(r["campaign_id"] for r in inserted if r.get("campaign_id"))
    campaign_progress.progress_add((cid, Status.SCHEDULED.value, n) for cid, n in per_campaign.items())


def _insert_one(message: Message, details: dict | str, actor: str, now: datetime) -> list[tuple[int, str]]:
    """One message (the API's) and its "created" event. On PostgreSQL one INSERT statement carrying the
    values the ORM's save() would send (each field's pre_save and get_db_prep_save); elsewhere (SQLite),
    or when a value is an expression such as a database default, the ORM saves both in a savepoint."""
    event = MessageEvent(
        kind="created",
        from_status=Status.SCHEDULED,
        to_status=Status.SCHEDULED,
        actor=actor,
        details=(json.loads(details) if isinstance(details, str) else details) or {},
        created_at=now,
    )
    made = _insert_one_pg(message, event) if connection.vendor == "postgresql" else None
    if made is not None:
        return made
    try:
        with transaction.atomic():
            message.save()
            event.message_id = message.pk
            event.save()
    except IntegrityError:
        return []  # its key is already there: what ON CONFLICT DO NOTHING answers on PostgreSQL
    return [(message.pk, message.public_id)]


def _insert_one_pg(message: Message, event: MessageEvent) -> list[tuple[int, str]] | None:
    """The one-row statement, or None when a value is an expression (the ORM then inserts)."""
    _, all_fields, event_fields = _one_row_sql(connection.alias)
    given = [(f, f.pre_save(message, True)) for f in all_fields]
    given = [(f, v) for f, v in given if v is not None or f.has_db_default()]
    sql, _, _ = _one_row_sql(connection.alias, tuple(f.attname for f, _ in given))
    pairs = given + [(f, f.pre_save(event, True)) for f in event_fields]
    if any(hasattr(v, "resolve_expression") for _, v in pairs):
        return None
    params = [f.get_db_prep_save(v, connection) for f, v in pairs]
    row = fetchone_prepared(sql, params)  # every single create: prepared once per connection
    if row is None:
        return []
    message.pk = row[0]
    message._state.adding = False
    message._state.db = connection.alias
    return [(message.pk, message.public_id)]


def insert_fields(model) -> list:
    """The columns save() inserts (the primary key is generated and read back)."""
    meta = model._meta
    return [f for f in meta.local_concrete_fields if not f.generated and f is not meta.auto_field]


@cache
def _one_row_sql(alias: str, names: tuple[str, ...] | None = None) -> tuple[str, list, list]:
    """PostgreSQL: the message row and its "created" event in one statement (a data-modifying CTE), so
    both commit together, in one round trip. ``names``: the message columns given a value (the others are
    NULL): psycopg caches a statement's parsing only up to 50 parameters, and a message has more columns
    than that, most of them NULL at creation (measured: the parsing was a tenth of a request). Built once
    per set of columns: (sql, message fields, event fields)."""
    qn = connections[alias].ops.quote_name
    message_fields = insert_fields(Message)
    if names is not None:
        message_fields = [f for f in message_fields if f.attname in names]
    message_fk = MessageEvent._meta.get_field("message")
    event_fields = [f for f in insert_fields(MessageEvent) if f is not message_fk]
    pk_column = Message._meta.pk.column
    assert pk_column is not None  # a concrete field always has a column (Field.get_attname_column)
    pk = qn(pk_column)
    sql = (
        f"WITH m AS (INSERT INTO {qn(Message._meta.db_table)} "  # noqa: S608
        f"({', '.join(qn(f.column) for f in message_fields)}) "
        f"VALUES ({', '.join(['%s'] * len(message_fields))}) ON CONFLICT DO NOTHING RETURNING {pk}) "
        f"INSERT INTO {qn(MessageEvent._meta.db_table)} "
        f"({qn(message_fk.column)}, {', '.join(qn(f.column) for f in event_fields)}) "
        f"SELECT m.{pk}, {', '.join(['%s'] * len(event_fields))} FROM m RETURNING {qn(message_fk.column)}"
    )
    return sql, message_fields, event_fields


def _insert_orm(rows: Sequence[tuple[dict, dict | str]], actor: str, now: datetime) -> list[tuple[int, str]]:
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
                details=_details_dict(by_public[public_id]),
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


def _details_dict(details: dict | str) -> dict:
    return json.loads(details) if isinstance(details, str) else details


def _insert_pg(rows: Sequence[tuple[dict, dict | str]], actor: str, now: datetime) -> list[tuple[int, str]]:
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
