from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0010_message_route")]

    operations = [
        migrations.AddField(
            model_name="message",
            name="status_callback",
            field=models.CharField(blank=True, db_default="", default="", max_length=1024),
        ),
    ]
