import secrets

from django.db import migrations, models

import smsgw.models


def _fill(apps, schema_editor):
    Tenant = apps.get_model("smsgw", "Tenant")
    for tenant in Tenant.objects.filter(facade_account_sid__isnull=True).only("pk"):
        Tenant.objects.filter(pk=tenant.pk).update(
            facade_account_sid="AC" + secrets.token_hex(16), callback_signing_key=secrets.token_hex(16)
        )


class Migration(migrations.Migration):
    dependencies = [("smsgw", "0010_roles_host_circuit")]

    operations = [
        # Added empty, filled one value per tenant, then made unique and required: a column default would
        # give every existing tenant the same SID.
        migrations.AddField(
            model_name="tenant",
            name="facade_account_sid",
            field=models.CharField(max_length=34, null=True),
        ),
        migrations.AddField(
            model_name="tenant",
            name="callback_signing_key",
            field=models.CharField(max_length=64, null=True),
        ),
        migrations.RunPython(_fill, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="tenant",
            name="facade_account_sid",
            field=models.CharField(default=smsgw.models.new_facade_account_sid, max_length=34, unique=True),
        ),
        migrations.AlterField(
            model_name="tenant",
            name="callback_signing_key",
            field=models.CharField(default=smsgw.models.new_callback_signing_key, max_length=64),
        ),
        migrations.AddField(
            model_name="tenant",
            name="facade_strict",
            field=models.BooleanField(db_default=False, default=False),
        ),
    ]
