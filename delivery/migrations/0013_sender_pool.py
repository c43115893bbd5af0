from django.db import migrations


class Migration(migrations.Migration):

    # The core's neutral name for a sender pool (issue 39). Only the column is renamed.
    dependencies = [
        ('delivery', '0012_sender_capacity_tenant_caps'),
    ]

    operations = [
        migrations.RenameField(model_name='optoutsignal', old_name='messaging_service_sid', new_name='sender_pool'),
    ]
