"""Destination guards (delivery.guards.destinations, delivery.guards.velocity): each tenant's country and
allowed countries,
its own denied and exempt prefixes, and its velocity limits. Existing tenants get their country from
their E.164 default_from where libphonenumber knows its region, else SMSGW_DEFAULT_COUNTRY, so what
they may send to after the upgrade is written down rather than inferred on every send."""

import phonenumbers
from django.conf import settings
from django.db import migrations, models


def countries_fill(apps, schema_editor):
    Tenant = apps.get_model("smsgw", "Tenant")
    for tenant in Tenant.objects.filter(country=""):
        region = ""
        if tenant.default_from.startswith("+"):
            try:
                region = phonenumbers.region_code_for_number(phonenumbers.parse(tenant.default_from, None))
            except phonenumbers.NumberParseException:
                region = ""
        if not region or region == "001":
            region = settings.DEFAULT_COUNTRY
        Tenant.objects.filter(pk=tenant.pk).update(country=region)


class Migration(migrations.Migration):

    dependencies = [
        ('smsgw', '0005_roles_suppressions'),
    ]

    operations = [
        migrations.AddField(
            model_name='tenant',
            name='allowed_countries',
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name='tenant',
            name='country',
            field=models.CharField(blank=True, db_default='', default='', max_length=2),
        ),
        migrations.AddField(
            model_name='tenant',
            name='deny_exempt_prefixes',
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name='tenant',
            name='deny_prefixes',
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name='tenant',
            name='velocity_new_numbers_max',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='tenant',
            name='velocity_prefix_digits',
            field=models.PositiveSmallIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='tenant',
            name='velocity_prefix_max',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(countries_fill, migrations.RunPython.noop),
    ]
