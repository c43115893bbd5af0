"""The roles again, now that the queues' consumers are in the admin: every role sees them, read-only
(smsgw.console.roles; the console's landing page, docs/admin.md)."""

from django.db import migrations


def roles_update(apps, schema_editor):
    from smsgw.console.roles import roles_sync

    roles_sync(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("smsgw", "0019_roles_inbound"),
        ("observability", "0005_console_minutes"),
    ]

    operations = [migrations.RunPython(roles_update, migrations.RunPython.noop)]
