from django.db import migrations


def _full_access(apps, schema_editor):
    # Scopes were stored but never read, so every key had full access: an empty list now means "no
    # access" (smsgw.tenancy.scopes), and the keys issued before keep what they had. A few rows per tenant.
    ApiKey = apps.get_model("smsgw", "ApiKey")
    for key in ApiKey.objects.only("pk", "scopes").iterator():
        if not key.scopes:
            ApiKey.objects.filter(pk=key.pk).update(scopes=["*"])


class Migration(migrations.Migration):
    dependencies = [("smsgw", "0011_tenant_facade")]

    # Backwards leaves the rows as they are: "*" was what an empty list meant before.
    operations = [migrations.RunPython(_full_access, migrations.RunPython.noop)]
