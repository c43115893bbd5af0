from django.conf import settings
from django.db import migrations, models

import scheduling.models


def fill_blank_providers(apps, schema_editor):
    # Messages made before the provider was set at birth got it only when first sent: give the waiting
    # ones (and any other blank row) the provider they would have been sent through.
    Message = apps.get_model("scheduling", "Message")
    Message.objects.filter(provider="").update(provider=settings.SMSGW_PROVIDER)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0004_release_indexes"),
    ]

    operations = [
        migrations.AlterField(
            model_name="message",
            name="provider",
            field=models.CharField(default=scheduling.models.provider_default, max_length=32),
        ),
        migrations.RunPython(fill_blank_providers, migrations.RunPython.noop, elidable=True),
    ]
