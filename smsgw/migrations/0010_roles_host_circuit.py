"""The roles again, now that delivery has host circuits (viewer sees them; operator closes them;
smsgw.console.roles)."""

from django.db import migrations


def roles_update(apps, schema_editor):
    from smsgw.console.roles import roles_sync

    roles_sync(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("smsgw", "0009_roles_routes"),
        ("delivery", "0010_host_circuit"),
    ]

    operations = [migrations.RunPython(roles_update, migrations.RunPython.noop)]
