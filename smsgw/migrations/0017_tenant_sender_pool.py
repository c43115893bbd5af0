from django.db import migrations


class Migration(migrations.Migration):

    # The core's neutral name for the tenant's default sender pool (issue 39); the tenant admin form and
    # the tenant_create command keep their options. Only the column is renamed.
    dependencies = [
        ('smsgw', '0016_tenant_max_priority'),
    ]

    operations = [
        migrations.RenameField(model_name='tenant', old_name='messaging_service_sid', new_name='sender_pool'),
    ]
