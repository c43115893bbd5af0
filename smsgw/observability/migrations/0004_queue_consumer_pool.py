from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("observability", "0003_queue_consumers"),
    ]

    operations = [
        migrations.AddField(
            model_name="queueconsumer",
            name="processes",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="queueconsumer",
            name="busy",
            field=models.PositiveIntegerField(default=0),
        ),
    ]
