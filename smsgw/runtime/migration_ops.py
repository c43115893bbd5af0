"""Migration operations for tables that are large and written to all the time in production."""

from __future__ import annotations

from django.db import migrations


class AddIndexConcurrently(migrations.AddIndex):
    """``AddIndex`` that builds the index with ``CREATE INDEX CONCURRENTLY`` on PostgreSQL, so the API,
    the sweep and the send workers keep writing to the table while it is built (a plain ``CREATE INDEX``
    blocks every write for as long as it reads the table). Other databases (SQLite in the embedded run)
    get the plain ``CREATE INDEX``. The migration holding it must set ``atomic = False``: PostgreSQL
    refuses a concurrent build inside a transaction. django.contrib.postgres has the same operation, but
    PostgreSQL-only."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.add_index(model, self.index, concurrently=True)
        return None

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.remove_index(model, self.index, concurrently=True)
        return None

    def describe(self):
        return f"Concurrently create index {self.index.name} on {self.model_name}"
