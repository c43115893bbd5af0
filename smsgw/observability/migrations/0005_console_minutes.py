from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("observability", "0004_queue_consumer_pool"),
    ]

    operations = [
        migrations.CreateModel(
            name="ConsoleMinute",
            fields=[
                ("minute", models.DateTimeField(primary_key=True, serialize=False)),
                ("state", models.JSONField(blank=True, null=True)),
                ("flows", models.JSONField(blank=True, null=True)),
            ],
        ),
    ]
