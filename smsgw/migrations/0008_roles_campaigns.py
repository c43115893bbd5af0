"""The roles again, now that scheduling has campaigns (viewer sees them and their rejected rows;
operator pauses, resumes and cancels them; smsgw.console.roles)."""

from django.db import migrations


def roles_update(apps, schema_editor):
    from smsgw.console.roles import roles_sync

    roles_sync(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("smsgw", "0007_roles_review_holds"),
        ("scheduling", "0008_campaigns"),
    ]

    operations = [migrations.RunPython(roles_update, migrations.RunPython.noop)]
