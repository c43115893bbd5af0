from django.db import migrations, models


class Migration(migrations.Migration):
    # The core's neutral name for a message's sender pool (issue 39); the tenant APIs keep showing it
    # under Twilio's name (scheduling.facade.names). The model's field is renamed; its column keeps its name, so the release before this one
    # reads and writes it unchanged during a rolling deploy (docs/deploy.md, "Rolling out a release"). The
    # column itself can be renamed one release later.
    dependencies = [
        ("scheduling", "0015_message_deleted_at"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RenameField(model_name="message", old_name="messaging_service_sid", new_name="sender_pool"),
                migrations.AlterField(
                    model_name="message",
                    name="sender_pool",
                    field=models.CharField(blank=True, db_column="messaging_service_sid", max_length=64),
                ),
                migrations.RenameField(model_name="schedule", old_name="messaging_service_sid", new_name="sender_pool"),
                migrations.AlterField(
                    model_name="schedule",
                    name="sender_pool",
                    field=models.CharField(blank=True, db_column="messaging_service_sid", max_length=64),
                ),
                migrations.RenameField(model_name="campaign", old_name="messaging_service_sid", new_name="sender_pool"),
                migrations.AlterField(
                    model_name="campaign",
                    name="sender_pool",
                    field=models.CharField(blank=True, db_column="messaging_service_sid", max_length=64),
                ),
            ],
            database_operations=[],
        ),
    ]
