"""The roles again, now that operator jobs exist: every role sees the bulk jobs over a filter, their
progress and outcome, read-only (smsgw.console.roles; docs/admin.md, "Bulk jobs")."""

from django.db import migrations


def roles_update(apps, schema_editor):
    from smsgw.console.roles import roles_sync

    roles_sync(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("smsgw", "0020_roles_queue_consumers"),
        ("scheduling", "0022_operator_jobs"),
    ]

    operations = [migrations.RunPython(roles_update, migrations.RunPython.noop)]
