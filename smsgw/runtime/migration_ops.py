"""Migration operations for tables that are large and written to all the time in production."""

from __future__ import annotations

from django.contrib.postgres import operations as postgres
from django.db import migrations


class AddIndexConcurrently(postgres.AddIndexConcurrently):
    """Django's ``AddIndexConcurrently`` (``CREATE INDEX CONCURRENTLY``, so the API, the sweep and the send
    workers keep writing to the table while it is built; the migration sets ``atomic = False``), which is
    PostgreSQL-only, with a plain ``AddIndex`` on the other databases (SQLite in the embedded run)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        return migrations.AddIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        return migrations.AddIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)
