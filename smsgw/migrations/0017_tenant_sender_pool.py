from django.db import migrations, models


class Migration(migrations.Migration):
    # The core's neutral name for the tenant's default sender pool (issue 39). The model's field is renamed; its column keeps its name, so the release before this one
    # reads and writes it unchanged during a rolling deploy (docs/deploy.md, "Rolling out a release"). The
    # column itself can be renamed one release later.
    dependencies = [
        ("smsgw", "0016_tenant_max_priority"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RenameField(model_name="tenant", old_name="messaging_service_sid", new_name="sender_pool"),
                migrations.AlterField(
                    model_name="tenant",
                    name="sender_pool",
                    field=models.CharField(blank=True, db_column="messaging_service_sid", max_length=64),
                ),
            ],
            database_operations=[],
        ),
    ]
