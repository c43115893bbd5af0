from django.db import migrations


class Migration(migrations.Migration):

    # The core's neutral name for a message's sender pool (issue 39); the tenant APIs keep showing it
    # under Twilio's name (scheduling.facade.names). Only the column is renamed.
    dependencies = [
        ('scheduling', '0015_message_deleted_at'),
    ]

    operations = [
        migrations.RenameField(model_name='message', old_name='messaging_service_sid', new_name='sender_pool'),
        migrations.RenameField(model_name='schedule', old_name='messaging_service_sid', new_name='sender_pool'),
        migrations.RenameField(model_name='campaign', old_name='messaging_service_sid', new_name='sender_pool'),
    ]
