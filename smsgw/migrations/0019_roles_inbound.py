"""The roles again, now that inbound messages exist: every role sees them, the unrouted ones, their parts
and the tenants' keyword rules, read-only (smsgw.console.roles; docs/inbound.md, "Operators")."""

from django.db import migrations


def roles_update(apps, schema_editor):
    from smsgw.console.roles import roles_sync

    roles_sync(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("smsgw", "0018_tenantsender_sms_url"),
        ("inbound", "0002_retention_indexes_unrouted"),
    ]

    operations = [migrations.RunPython(roles_update, migrations.RunPython.noop)]
