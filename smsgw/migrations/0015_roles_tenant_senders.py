"""The roles again, now that tenants have senders (viewer sees them; admin assigns and releases them;
smsgw.console.roles)."""

from django.db import migrations


def roles_update(apps, schema_editor):
    from smsgw.console.roles import roles_sync

    roles_sync(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("smsgw", "0014_tenant_senders"),
        ("delivery", "0012_sender_capacity_tenant_caps"),
    ]

    operations = [migrations.RunPython(roles_update, migrations.RunPython.noop)]
