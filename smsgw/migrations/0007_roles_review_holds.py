"""The roles again, now that delivery has review holds (viewer sees them; operator releases and cancels
them; smsgw.console.roles)."""

from django.db import migrations


def roles_update(apps, schema_editor):
    from smsgw.console.roles import roles_sync

    roles_sync(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("smsgw", "0006_tenant_destination_guards"),
        ("delivery", "0007_review_holds"),
    ]

    operations = [migrations.RunPython(roles_update, migrations.RunPython.noop)]
