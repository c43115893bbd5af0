# The unique (provider, provider_message_id) index of messages, rebuilt with the provider's id first. On
# PostgreSQL the new index is built and the old one dropped CONCURRENTLY, so sends and receipts keep
# writing while a large table is indexed; elsewhere (SQLite) the constraint is simply replaced.

from django.db import migrations, models

OLD = models.UniqueConstraint(
    fields=["provider", "provider_message_id"],
    condition=models.Q(provider_message_id__isnull=False),
    name="msg_provider_message_id_unique",
)
NEW = models.UniqueConstraint(
    fields=["provider_message_id", "provider"],
    condition=models.Q(provider_message_id__isnull=False),
    name="msg_provider_sid_unique",
)

def _swap(apps, schema_editor, add, remove):
    model = apps.get_model("scheduling", "Message")
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.add_constraint(model, add)
        schema_editor.remove_constraint(model, remove)
        return
    table = model._meta.db_table
    columns = ", ".join(f'"{model._meta.get_field(name).column}"' for name in add.fields)
    # A partial unique index is how Django makes a conditional UniqueConstraint on PostgreSQL.
    schema_editor.execute(
        f'CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS "{add.name}" ON "{table}" ({columns}) '
        f'WHERE "provider_message_id" IS NOT NULL'
    )
    schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{remove.name}"')


def forwards(apps, schema_editor):
    _swap(apps, schema_editor, NEW, OLD)


def backwards(apps, schema_editor):
    _swap(apps, schema_editor, OLD, NEW)


class Migration(migrations.Migration):
    atomic = False  # CREATE / DROP INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("scheduling", "0013_message_waiting_expiry"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(model_name="message", name=OLD.name),
                migrations.AddConstraint(model_name="message", constraint=NEW),
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
    ]
