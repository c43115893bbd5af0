from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("observability", "0002_message_status_priority_statistics"),
    ]

    operations = [
        migrations.CreateModel(
            name="UnconsumedQueue",
            fields=[
                ("queue", models.CharField(max_length=255, primary_key=True, serialize=False)),
                ("since", models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name="QueueConsumer",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("hostname", models.CharField(max_length=255)),
                ("queue", models.CharField(max_length=255)),
                ("seen_at", models.DateTimeField()),
                ("stopped", models.BooleanField(default=False)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("hostname", "queue"), name="queue_consumer_node")
                ],
            },
        ),
    ]
