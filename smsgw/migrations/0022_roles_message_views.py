"""The roles again, now that the admin records who opened which message: the admin role reads that
record (smsgw.console.roles; docs/admin.md, "Who looked")."""

from django.db import migrations


def roles_update(apps, schema_editor):
    from smsgw.console.roles import roles_sync

    roles_sync(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("smsgw", "0021_roles_operator_jobs"),
        ("scheduling", "0023_message_views"),
    ]

    operations = [migrations.RunPython(roles_update, migrations.RunPython.noop)]
