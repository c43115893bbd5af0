from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Heartbeat",
            fields=[
                ("name", models.CharField(max_length=32, primary_key=True, serialize=False)),
                ("at", models.DateTimeField()),
            ],
        ),
    ]
