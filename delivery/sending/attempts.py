"""Attempt rows: created in the claim transaction, finished in bulk with the outcomes.

Django's bulk_update builds a CASE expression per column per row; for a 100-row batch that cost more
CPU than the provider calls themselves. One UPDATE ... FROM (arrays or VALUES) does the same work in a
single cheap statement (see smsgw.runtime.db for why arrays on PostgreSQL)."""

from __future__ import annotations

import json
import secrets
from datetime import datetime

from django.db import connection

from delivery.models import Attempt, AttemptOutcome
from smsgw.runtime.db import PgInts, PgTexts, is_postgres

TABLE = Attempt._meta.db_table


def attempt_route(row: dict) -> str:
    """The route an attempt goes by: the message's route and the leg it is on ("" without a route)."""
    route = row.get("route") or ""
    return f"{route}#{row.get('route_leg') or 0}"[:64] if route else ""


def attempts_start(
    rows: list[dict], *, provider: str, started_at: datetime, validity: dict[int, int] | None = None
) -> list[Attempt]:
    """One pending Attempt per claimed message row (``id``, ``provider_calls``), committed by the caller's
    transaction before any provider call. ``validity``: the ValidityPeriod each will be sent with."""
    validity = validity or {}
    attempts = [
        Attempt(
            message_id=r["id"],
            number=r["provider_calls"],
            provider=provider,
            route=attempt_route(r),
            idempotency_token=secrets.token_hex(16),
            started_at=started_at,
            outcome=AttemptOutcome.PENDING,
            validity_seconds=validity.get(r["id"]),
        )
        for r in rows
    ]
    if not attempts:
        return attempts
    if not is_postgres():
        return Attempt.objects.bulk_create(attempts)
    with connection.cursor() as cur:
        cur.execute(
            f'INSERT INTO "{TABLE}" ("message_id", "number", "provider", "route", "idempotency_token", '
            f'"started_at", "outcome", "provider_code", "error_class", "provider_message_id", "response", '
            f'"validity_seconds") '
            f"SELECT m, n, %s, r, t, %s, %s, '', '', '', '{{}}'::jsonb, v "
            f"FROM unnest(%s::bigint[], %s::integer[], %s::text[], %s::text[], %s::integer[]) "
            f"WITH ORDINALITY AS u(m, n, r, t, v, ord) "
            f'ORDER BY ord RETURNING "id"',
            [
                provider,
                started_at,
                AttemptOutcome.PENDING,
                PgInts([a.message_id for a in attempts]),
                PgInts([a.number for a in attempts]),
                PgTexts([a.route for a in attempts]),
                PgTexts([a.idempotency_token for a in attempts]),
                PgInts([a.validity_seconds for a in attempts]),
            ],
        )
        ids = [r[0] for r in cur.fetchall()]
    # INSERT ... SELECT ... ORDER BY returns ids in insertion order, which is the input order.
    for attempt, pk in zip(attempts, ids, strict=True):
        attempt.pk = pk
    return attempts


def attempts_finish(attempts: list[Attempt], *, finished_at: datetime) -> None:
    if not attempts:
        return
    columns = [
        [a.pk for a in attempts],
        [str(a.outcome) for a in attempts],
        [a.http_status for a in attempts],
        [a.provider_code or "" for a in attempts],
        [a.error_class or "" for a in attempts],
        [a.provider_message_id or "" for a in attempts],
        [a.latency_ms for a in attempts],
        [json.dumps(a.response or {}, default=str) for a in attempts],
        [a.validity_seconds for a in attempts],
    ]
    names = "vid, voutcome, vhttp, vcode, vclass, vsid, vlatency, vresponse, vvalidity"
    if is_postgres():
        types = [
            "bigint[]",
            "text[]",
            "integer[]",
            "text[]",
            "text[]",
            "text[]",
            "double precision[]",
            "text[]",
            "integer[]",
        ]
        source = f"SELECT * FROM unnest({', '.join(f'%s::{t}' for t in types)}) AS v({names})"
        fast = [PgInts, PgTexts, PgInts, PgTexts, PgTexts, PgTexts, list, PgTexts, PgInts]
        params: list = [kind(values) for kind, values in zip(fast, columns, strict=True)]
        response = "v.vresponse::jsonb"
    else:
        row_sql = (
            "(CAST(%s AS BIGINT), %s, CAST(%s AS INTEGER), %s, %s, %s, CAST(%s AS REAL), %s, "
            "CAST(%s AS INTEGER))"
        )
        source = f"WITH v({names}) AS (VALUES {', '.join([row_sql] * len(attempts))}) SELECT * FROM v"
        params = [value for row in zip(*columns, strict=True) for value in row]
        response = "v.vresponse"
    sql = (
        f'UPDATE "{TABLE}" SET "finished_at" = %s, "outcome" = v.voutcome, "http_status" = v.vhttp, '
        f'"provider_code" = v.vcode, "error_class" = v.vclass, "provider_message_id" = v.vsid, '
        f'"latency_ms" = v.vlatency, '
        f'"validity_seconds" = COALESCE(v.vvalidity, "{TABLE}"."validity_seconds"), '
        f'"response" = {response} FROM ({source}) AS v WHERE "{TABLE}"."id" = v.vid'
    )
    with connection.cursor() as cur:
        cur.execute(sql, [finished_at, *params])
