"""Small helpers for the batched SQL the pipeline runs.

On PostgreSQL a batch is passed as arrays (``= ANY(%s)``, ``unnest(%s::type[], ...)``): the statement
text stays the same whatever the batch size, so psycopg and the server parse and plan it once, instead
of re-parsing a statement with hundreds of placeholders for every batch. Other databases (SQLite in the
embedded mode) get the portable VALUES / IN form."""

from __future__ import annotations

from django.db import connection


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


def pg_array_type(field) -> str:
    return f"{field.db_type(connection)}[]"


def in_clause(column: str, ids: list[int]) -> tuple[str, list]:
    """``column IN (...)`` for a list of ids, as (sql, params)."""
    if is_postgres():
        return f"{column} = ANY(%s)", [list(ids)]
    return f"{column} IN ({', '.join(['%s'] * len(ids))})", list(ids)
