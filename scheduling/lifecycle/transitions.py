"""The one writer of message status.

Every lifecycle change is a compare-and-set: an UPDATE whose WHERE clause names the status (and, where the
caller knows it, the version) it expects. The row count / RETURNING set says who won; the loser changes
nothing and reads the winner's state. The MessageEvent for each change is written in the same transaction, so
the timeline can never disagree with the status. Each edge writes its own timestamps (EDGES), and a reason
code is one of scheduling.lifecycle.reasons.ReasonCode: callers say which edge and why, not which columns.
Campaigns and schedules have their own (scheduling.lifecycle.campaigns, scheduling.lifecycle.schedules).

Batch variants exist because one transaction per SMS caps a single PostgreSQL near ~2,600 rows/s while
one UPDATE ... RETURNING over a batch runs at tens of thousands of rows/s; each row still gets its own
CAS condition, version bump and event.

The columns a move may set and return are scheduling.lifecycle.columns; timeline notes without a status
change, scheduling.lifecycle.notes (``event_record``, named here too).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from scheduling.campaigns.progress import progress_add
from scheduling.lifecycle.columns import (
    SETTABLE,
    field_of,
    reason_check,
    returning_clause,
    rows_from,
    set_clause,
    settable_check,
)
from scheduling.lifecycle.notes import details_traced
from scheduling.lifecycle.notes import event_record as event_record  # notes go through here too
from scheduling.lifecycle.notes import events_record_many as events_record_many
from scheduling.models import Message, MessageEvent, Status
from smsgw import stages
from smsgw.runtime.db import PgInts, PgTexts, in_clause, is_postgres, pg_array, pg_array_type

S = Status
# The move's own time, in the edge table below.
NOW = object()
# Every allowed edge, and the timestamps it writes: NOW stamps the column with the move's time, None
# empties it. A caller that knows a better time for the stamp (a receipt's own time, the creation date a
# provider lookup returned) names the column in ``set_fields`` or per row, and its value is kept.
EDGES: dict[tuple[str, str], dict[str, object]] = {
    (S.SCHEDULED, S.SCHEDULED): {},  # reschedule / edit (version bump)
    (S.SCHEDULED, S.QUEUED): {"queued_at": NOW},
    (S.SCHEDULED, S.CANCELLED): {"cancelled_at": NOW},
    (S.SCHEDULED, S.EXPIRED): {"expired_at": NOW},
    # due while the daily quota is used up, tenant policy "fail" (limits)
    (S.SCHEDULED, S.FAILED): {"failed_at": NOW},
    # A restore fence (delivery.sending.fence): a message due since the backup may have been sent by the
    # history the restore lost; it waits in `sending`, uncertain, until the provider is asked.
    (S.SCHEDULED, S.SENDING): {"sending_at": NOW},
    (S.QUEUED, S.QUEUED): {},  # re-publish after a presumed-lost broker message
    (S.QUEUED, S.SENDING): {"sending_at": NOW},
    (S.QUEUED, S.CANCELLED): {"cancelled_at": NOW},
    (S.QUEUED, S.EXPIRED): {"expired_at": NOW},
    (S.SENDING, S.SENDING): {},  # lease extension while an uncertain attempt is reconciled
    (S.SENDING, S.SENT): {"sent_at": NOW},
    (S.SENDING, S.QUEUED): {},  # transient error or reconciled-absent: retry later
    (S.SENDING, S.FAILED): {"failed_at": NOW},
    (S.SENT, S.DELIVERED): {"delivered_at": NOW},
    (S.SENT, S.UNDELIVERED): {"failed_at": NOW},
    (S.SENT, S.FAILED): {"failed_at": NOW},
    (S.SENDING, S.DELIVERED): {"delivered_at": NOW},  # receipt overtook the submit response
    (S.SENDING, S.UNDELIVERED): {"failed_at": NOW},
    # The provider reported `failed` for a class that allows a resend (queue overflow, a held
    # account): it never handed the message on, so sending it again cannot duplicate it.
    (S.SENT, S.QUEUED): {},
    # A retry was queued after reconciliation found nothing, then a signed callback proved the earlier
    # attempt did reach the provider: record it as sent instead of sending a second copy.
    (S.QUEUED, S.SENT): {"sent_at": NOW},
    (S.FAILED, S.QUEUED): {"failed_at": None},  # operator replay from dead letter (audited)
    # An operator's correction before a replay: body, sender, route (scheduling.messages.corrections).
    (S.FAILED, S.FAILED): {},
}
ALLOWED: frozenset[tuple[str, str]] = frozenset(EDGES)

# Every status-changing statement returns the campaign too, so the campaign's progress counters move in
# the same transaction at no extra query (scheduling.campaigns.progress); non-campaign rows cost nothing.
CAMPAIGN = "campaign_id"

TABLE = Message._meta.db_table
EVENT_TABLE = MessageEvent._meta.db_table


# The status a compare-and-set expects of a row it already names by id. Written so that no index can
# serve it (``status || ''``): the rows are found by primary-key probes, one per id, and the status is
# only checked on the row found. As a plain ``status = %s`` PostgreSQL may instead read the partial
# index of that status end to end and join it to the batch; on statistics from before the rows reached
# that status (a table between two ANALYZEs) it takes that index for nearly empty, and under `bench soak`
# the receipt batch's `sent` -> `delivered` move read every `sent` row for 100 receipts
# (tests/scheduling/lifecycle/test_transition_plans.py).
EXPECTED_STATUS = f'("{TABLE}"."status" || \'\') = %s'


class TransitionNotAllowed(Exception):
    pass


@dataclass(frozen=True)
class CasResult:
    won: bool
    status: str  # the status after the attempt: the new one if won, the winner's otherwise
    version: int


def _check(from_statuses: Iterable[str], to_status: str) -> None:
    for src in from_statuses:
        if (src, to_status) not in ALLOWED:
            raise TransitionNotAllowed(f"{src} -> {to_status}")


def _fields(
    from_status: str,
    to_status: str,
    set_fields: dict[str, Any] | None,
    now: datetime,
    per_row: Sequence[str] = (),
) -> dict[str, Any]:
    """What a move writes besides status and version: the edge's stamps (EDGES), then the caller's
    columns, whose values win; a column the caller sets per row is left to the row."""
    stamps = EDGES[(from_status, to_status)].items()
    fields = {column: now if value is NOW else value for column, value in stamps if column not in per_row}
    fields.update(set_fields or {})
    return _unpublished(to_status, fields, per_row)


def stamp_column(from_status: str, to_status: str) -> str | None:
    """The column this edge stamps with the move's time: where a caller that knows a better time puts it."""
    return next((column for column, value in EDGES[(from_status, to_status)].items() if value is NOW), None)


def _unpublished(to_status: str, set_fields: dict[str, Any], per_row: Sequence[str] = ()) -> dict:
    """A message that becomes `queued` (or stays so) any other way than by being published (a hold
    released, a retry after reconciliation, a replay) has no task in the broker: ``published_at`` is
    cleared, so that the release step publishes it instead of taking it for a task lost or waiting
    (scheduling.dispatch.recovery). The release step and the circuit probe set it themselves."""
    fields = dict(set_fields)
    if to_status == "queued" and "published_at" not in fields and "published_at" not in per_row:
        fields["published_at"] = None
    return fields


def _events(
    ids: Iterable[int], *, kind: str, from_status: str, to_status: str, actor: str, details, now: datetime
) -> None:
    ids = list(ids)
    if not ids:
        return
    details = details_traced(ids, details)  # each traced message's trace id (smsgw.tracing)
    _events_insert(
        ids, kind=kind, from_status=from_status, to_status=to_status, actor=actor, details=details, now=now
    )
    if from_status != to_status:
        # Inside this transaction (smsgw.stages.status_listeners): the tenant-webhook outbox commits or
        # rolls back with the change it reports, without scheduling importing receipts.
        for listener in stages.status_listeners():
            listener(ids, from_status, to_status, kind, now)


def _events_insert(
    ids: list[int], *, kind: str, from_status: str, to_status: str, actor: str, details, now: datetime
) -> None:
    if not is_postgres():
        MessageEvent.objects.bulk_create(
            [
                MessageEvent(
                    message_id=mid,
                    kind=kind,
                    from_status=from_status,
                    to_status=to_status,
                    actor=actor,
                    details=details(mid) if callable(details) else (details or {}),
                    created_at=now,
                )
                for mid in ids
            ]
        )
        return
    # One INSERT ... SELECT FROM unnest(arrays): same statement text for any batch size.
    if callable(details):
        per_row = [json.dumps(details(mid), default=str) for mid in ids]
    else:
        per_row = [json.dumps(details or {}, default=str)] * len(ids)
    with connection.cursor() as cur:
        cur.execute(
            f'INSERT INTO "{EVENT_TABLE}" ("message_id", "kind", "from_status", "to_status", "actor", '
            f'"details", "created_at") SELECT m, %s, %s, %s, %s, d::jsonb, %s '
            f"FROM unnest(%s::bigint[], %s::text[]) AS t(m, d)",
            [kind, from_status, to_status, actor, now, PgInts(ids), PgTexts(per_row)],
        )


def _progress(rows: Iterable[dict[str, Any]], from_status: str, to_status: str) -> None:
    """-1 on the old status and +1 on the new one for each campaign message that moved."""
    if from_status == to_status:
        return
    moved: dict[int, int] = {}
    for row in rows:
        cid = row.get(CAMPAIGN)
        if cid is not None:
            moved[cid] = moved.get(cid, 0) + 1
    if moved:
        progress_add(
            [(cid, from_status, -n) for cid, n in moved.items()]
            + [(cid, to_status, n) for cid, n in moved.items()]
        )


def _strip(rows: list[dict[str, Any]], asked: Sequence[str]) -> list[dict[str, Any]]:
    if CAMPAIGN not in asked:
        for row in rows:
            row.pop(CAMPAIGN, None)
    return rows


def transition(
    message_id: int,
    *,
    from_statuses: Iterable[str],
    to_status: str,
    kind: str,
    actor: str = "system",
    details: dict | None = None,
    set_fields: dict[str, Any] | None = None,
    expected_version: int | None = None,
    now: datetime | None = None,
) -> CasResult:
    """Compare-and-set one message. Never raises on a lost race: returns won=False and the current state."""
    froms = [str(s) for s in from_statuses]
    _check(froms, to_status)
    settable_check(set_fields or {})  # before the transaction: a refused column must not spoil the caller's
    now = now or timezone.now()
    with transaction.atomic(savepoint=False):
        # Read-then-CAS on (status, version): the version pins the exact row state we read, so the
        # event's from_status is exact even when several source statuses are allowed.
        current = (
            Message.objects.filter(pk=message_id).values_list("status", "version", "campaign_id").first()
        )
        if current is None:
            raise Message.DoesNotExist(message_id)
        status, version, campaign_id = current
        if status not in froms or (expected_version is not None and version != expected_version):
            return CasResult(False, status, version)
        set_sql, set_params = set_clause(_fields(status, to_status, set_fields, now))
        with connection.cursor() as cur:
            cur.execute(
                f'UPDATE "{TABLE}" SET "status" = %s, "version" = "version" + 1, "updated_at" = %s{set_sql} '
                f'WHERE "id" = %s AND "status" = %s AND "version" = %s',
                [to_status, now, *set_params, message_id, status, version],
            )
            won = cur.rowcount == 1
        if not won:
            fresh = Message.objects.filter(pk=message_id).values_list("status", "version").get()
            return CasResult(False, fresh[0], fresh[1])
        _progress([{CAMPAIGN: campaign_id}], status, to_status)
        _events(
            [message_id],
            kind=kind,
            from_status=status,
            to_status=to_status,
            actor=actor,
            details=details,
            now=now,
        )
    return CasResult(True, to_status, version + 1)


def transition_many(
    ids: Sequence[int],
    *,
    from_status: str,
    to_status: str,
    kind: str,
    actor: str = "system",
    details=None,
    set_fields: dict[str, Any] | None = None,
    returning: Sequence[str] = ("id", "version"),
    bump_attempts: bool = False,
    extra_where: str = "",
    extra_params: Sequence[Any] = (),
    now: datetime | None = None,
) -> list[dict[str, Any]]:
    """CAS a batch of known ids from one status. Returns the rows that moved (the winners).
    ``extra_where`` narrows the batch further (a trusted SQL fragment written in this codebase)."""
    if not ids:
        return []
    _check([from_status], to_status)
    now = now or timezone.now()
    set_sql, set_params = set_clause(_fields(from_status, to_status, set_fields, now))
    if bump_attempts:
        set_sql += ', "attempt_count" = "attempt_count" + 1, "provider_calls" = "provider_calls" + 1'
    extra = f" AND ({extra_where})" if extra_where else ""
    cols = list(dict.fromkeys(["id", *returning, CAMPAIGN]))
    id_sql, id_params = in_clause('"id"', list(ids))
    with transaction.atomic(savepoint=False):
        with connection.cursor() as cur:
            cur.execute(
                f'UPDATE "{TABLE}" SET "status" = %s, "version" = "version" + 1, "updated_at" = %s{set_sql} '
                f"WHERE {id_sql} AND {EXPECTED_STATUS}{extra} RETURNING {returning_clause(cols)}",
                [to_status, now, *set_params, *id_params, from_status, *extra_params],
            )
            rows = rows_from(cur, cols)
        _progress(rows, from_status, to_status)
        _events(
            [r["id"] for r in rows],
            kind=kind,
            from_status=from_status,
            to_status=to_status,
            actor=actor,
            details=details,
            now=now,
        )
    return _strip(rows, returning)


def transition_versioned(
    items: Sequence[tuple[int, int, dict[str, Any]]],
    *,
    from_status: str,
    to_status: str,
    kind: str,
    actor: str = "system",
    details=None,
    set_fields: dict[str, Any] | None = None,
    per_row_columns: Sequence[str] = (),
    now: datetime | None = None,
) -> list[int]:
    """CAS a batch where each row carries the version the caller holds and its own column values
    (e.g. the provider message id). Returns the ids that moved."""
    if not items:
        return []
    _check([from_status], to_status)
    now = now or timezone.now()
    set_sql, set_params = set_clause(_fields(from_status, to_status, set_fields, now, per_row_columns))
    per_row = list(per_row_columns)
    if set(per_row) - SETTABLE:
        raise ValueError(f"not settable: {per_row}")
    if "reason_code" in per_row:
        for _, _, values in items:
            reason_check(values["reason_code"])
    fields = [field_of(c) for c in per_row]
    vcols = ", ".join(["vid", "vversion", *[f"v_{c}" for c in per_row]])
    per_row_set = "".join(f', "{f.column}" = v.v_{f.name}' for f in fields)
    columns = [[mid for mid, _, _ in items], [version for _, version, _ in items]] + [
        [f.get_db_prep_save(values[f.name], connection) for _, _, values in items] for f in fields
    ]
    if is_postgres():
        # Arrays: one statement text for every batch size (see smsgw.runtime.db).
        types = ["bigint[]", "bigint[]", *[pg_array_type(f) for f in fields]]
        source = f"SELECT * FROM unnest({', '.join(f'%s::{t}' for t in types)}) AS v({vcols})"
        params: list[Any] = [PgInts(columns[0]), PgInts(columns[1])] + [
            pg_array(f, values) for f, values in zip(fields, columns[2:], strict=True)
        ]
    else:
        row_sql = "(CAST(%s AS BIGINT), CAST(%s AS BIGINT)" + "".join(", %s" for _ in per_row) + ")"
        source = f"WITH v({vcols}) AS (VALUES {', '.join([row_sql] * len(items))}) SELECT * FROM v"
        params = [value for row in zip(*columns, strict=True) for value in row]
    sql = (
        f'UPDATE "{TABLE}" SET "status" = %s, "version" = "{TABLE}"."version" + 1, "updated_at" = %s'
        f"{set_sql}{per_row_set} FROM ({source}) AS v "
        f'WHERE "{TABLE}"."id" = v.vid AND "{TABLE}"."version" = v.vversion AND {EXPECTED_STATUS} '
        f'RETURNING "{TABLE}"."id", "{TABLE}"."campaign_id"'
    )
    with transaction.atomic(savepoint=False):
        with connection.cursor() as cur:
            cur.execute(sql, [to_status, now, *set_params, *params, from_status])
            fetched = cur.fetchall()
        moved = [r[0] for r in fetched]
        _progress(({CAMPAIGN: r[1]} for r in fetched), from_status, to_status)
        _events(
            moved,
            kind=kind,
            from_status=from_status,
            to_status=to_status,
            actor=actor,
            details=details,
            now=now,
        )
    return moved


def claim(
    *,
    from_status: str,
    to_status: str,
    kind: str,
    where_sql: str,
    where_params: Sequence[Any],
    order_by: str,
    limit: int,
    set_fields: dict[str, Any] | None = None,
    returning: Sequence[str] = ("id", "version"),
    details=None,
    now: datetime | None = None,
) -> list[dict[str, Any]]:
    """Claim up to ``limit`` rows in ``from_status`` matching ``where_sql`` and move them, in one
    statement. On PostgreSQL the inner SELECT takes ``FOR UPDATE SKIP LOCKED`` so concurrent sweeps
    claim disjoint batches instead of queueing on each other's locks; on SQLite the IMMEDIATE
    transaction serialises writers and the outer status condition keeps it a compare-and-set."""
    _check([from_status], to_status)
    now = now or timezone.now()
    set_sql, set_params = set_clause(_fields(from_status, to_status, set_fields, now))
    cols = list(dict.fromkeys(["id", *returning, CAMPAIGN]))
    lock = " FOR UPDATE SKIP LOCKED" if connection.vendor == "postgresql" else ""
    # A MATERIALIZED CTE, not `WHERE id IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)`: PostgreSQL may
    # re-run such a sub-select per outer row and so claim more than `limit` rows.
    returning_sql = ", ".join(f'"{TABLE}".{c}' for c in returning_clause(cols).split(", "))
    sql = (
        f'WITH picked AS MATERIALIZED (SELECT "id" AS pid FROM "{TABLE}" WHERE "status" = %s AND {where_sql} '
        f"ORDER BY {order_by} LIMIT %s{lock}) "
        f'UPDATE "{TABLE}" SET "status" = %s, "version" = "{TABLE}"."version" + 1, '
        f'"updated_at" = %s{set_sql} FROM picked '
        f'WHERE "{TABLE}"."id" = picked.pid AND {EXPECTED_STATUS} '
        f"RETURNING {returning_sql}"
    )
    with transaction.atomic(savepoint=False):
        with connection.cursor() as cur:
            cur.execute(sql, [from_status, *where_params, limit, to_status, now, *set_params, from_status])
            rows = rows_from(cur, cols)
        _progress(rows, from_status, to_status)
        _events(
            [r["id"] for r in rows],
            kind=kind,
            from_status=from_status,
            to_status=to_status,
            actor="system",
            details=details,
            now=now,
        )
    return _strip(rows, returning)


def run_after_push(ids: Sequence[int], *, status: str, run_after: datetime) -> int:
    """Move ``run_after`` of rows still in ``status`` without a status change or timeline entry (a held
    message parked again until the next probe: its `held` entry was written when it was first held)."""
    if not ids:
        return 0
    return Message.objects.filter(pk__in=list(ids), status=status).update(run_after=run_after)


def run_after_set_many(items: Sequence[tuple[int, datetime]], *, status: str) -> int:
    """Per-row ``run_after`` of rows still in ``status``, without a status change or timeline entry (a
    message that keeps waiting for the same reason: its entry was written when it started to wait)."""
    if not items:
        return 0
    field = Message._meta.get_field("run_after")
    ids = [mid for mid, _ in items]
    values = [field.get_db_prep_save(at, connection) for _, at in items]
    if is_postgres():
        source = "SELECT * FROM unnest(%s::bigint[], %s::timestamptz[]) AS v(vid, vat)"
        params: list[Any] = [PgInts(ids), values]
    else:
        row_sql = "(CAST(%s AS BIGINT), %s)"
        source = f"WITH v(vid, vat) AS (VALUES {', '.join([row_sql] * len(items))}) SELECT * FROM v"
        params = [value for pair in zip(ids, values, strict=True) for value in pair]
    with connection.cursor() as cur:
        cur.execute(
            f'UPDATE "{TABLE}" SET "run_after" = v.vat FROM ({source}) AS v '
            f'WHERE "{TABLE}"."id" = v.vid AND {EXPECTED_STATUS}',
            [*params, status],
        )
        return cur.rowcount
