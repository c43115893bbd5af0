"""The history table's storage on PostgreSQL: declarative range partitions, one per purge day
(docs/retention.md, "Why partitions"). Pruning a day is ``DETACH`` + ``DROP`` of one partition, constant
time however many rows it holds; a batched ``DELETE`` of a million rows costs seconds to minutes, leaves
dead tuples for vacuum, and competes with the sweep for I/O. Other databases (SQLite, embedded mode) get a
plain table that pruning deletes from.

Partitions are made on demand, just before a move writes into a day that has none
(``partitions_ensure``), each in its own short transaction: a ``CREATE TABLE ... PARTITION OF`` locks the
parent briefly, never the operational tables.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django.db import connection, migrations, transaction

TABLE = "retention_messagehistory"

# The columns as Django declares them (retention.models.MessageHistory), with the primary key widened to
# hold the partition key, which PostgreSQL requires of every unique key of a partitioned table. The id
# first: Django addresses rows by id alone (a redaction, an erasure), one index probe per partition.
_CREATE = f"""
CREATE TABLE {TABLE} (
    id bigint NOT NULL,
    public_id varchar(32) NOT NULL,
    tenant_id bigint NOT NULL,
    "to" varchar(20) NOT NULL,
    from_number varchar(32) NOT NULL,
    status varchar(16) NOT NULL,
    reason_code varchar(32) NOT NULL,
    provider varchar(32) NOT NULL,
    provider_message_id varchar(64) NULL,
    idempotency_key varchar(255) NULL,
    campaign_id bigint NULL,
    schedule_id bigint NULL,
    created_at timestamp with time zone NOT NULL,
    due_at timestamp with time zone NULL,
    sent_at timestamp with time zone NULL,
    finished_at timestamp with time zone NOT NULL,
    deleted boolean NOT NULL,
    moved_at timestamp with time zone NOT NULL,
    purge_on date NOT NULL,
    redact_on date NULL,
    document jsonb NOT NULL,
    PRIMARY KEY (id, purge_on)
) PARTITION BY RANGE (purge_on)
"""


def partitioned() -> bool:
    return connection.vendor == "postgresql"


def partition_name(day: date) -> str:
    return f"{TABLE}_p{day:%Y%m%d}"


class CreateHistoryTable(migrations.operations.base.Operation):
    """Creates the history table: partitioned on PostgreSQL, plain elsewhere. The model's state comes
    from the CreateModel beside it (SeparateDatabaseAndState)."""

    reduces_to_sql = True
    reversible = True

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return (self.__class__.__qualname__, [self.model_name], {})

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        if schema_editor.connection.vendor != "postgresql":
            schema_editor.create_model(model)
            return
        schema_editor.execute(_CREATE)
        for index in model._meta.indexes:  # on the parent: each partition gets its own copy
            schema_editor.add_index(model, index)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        model = from_state.apps.get_model(app_label, self.model_name)
        schema_editor.delete_model(model)

    def describe(self) -> str:
        return f"Create the history table {self.model_name} (partitioned on PostgreSQL)"


def partitions_existing() -> list[date]:
    """The purge days that have a partition, oldest first (PostgreSQL only)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = %s",
            [TABLE],
        )
        names = [row[0] for row in cur.fetchall()]
    prefix = f"{TABLE}_p"
    days = []
    for name in names:
        if name.startswith(prefix):
            stamp = name[len(prefix) :]
            days.append(date(int(stamp[:4]), int(stamp[4:6]), int(stamp[6:8])))
    return sorted(days)


def partitions_ensure(days: set[date]) -> int:
    """Make the partitions these purge days need (PostgreSQL); the number made. Each in its own
    transaction, outside any move, so a move never holds the parent's lock while it copies rows."""
    if not partitioned() or not days:
        return 0
    have = set(partitions_existing())
    made = 0
    for day in sorted(days - have):
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {partition_name(day)} PARTITION OF {TABLE} "
                "FOR VALUES FROM (%s) TO (%s)",
                [day, day + timedelta(days=1)],
            )
        made += 1
    return made


def partition_drop(day: date) -> None:
    """Remove one purge day's partition and every row in it: DETACH, then DROP (PostgreSQL)."""
    name = partition_name(day)
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(f"ALTER TABLE {TABLE} DETACH PARTITION {name}")
        cur.execute(f"DROP TABLE {name}")
