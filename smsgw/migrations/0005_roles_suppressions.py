"""The roles again, now that delivery has the suppression list (viewer sees it; operator adds and
removes entries; smsgw.console.roles)."""

from django.db import migrations


def roles_update(apps, schema_editor):
    from smsgw.console.roles import roles_sync

    # Models added later (campaigns) get their rights in a later migration (0006).
    roles_sync(apps, allow_missing=True)


class Migration(migrations.Migration):
    dependencies = [
        ("smsgw", "0004_operator_roles"),
        ("delivery", "0006_suppression"),
    ]

    operations = [migrations.RunPython(roles_update, migrations.RunPython.noop)]
