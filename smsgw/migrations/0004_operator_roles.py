"""The `viewer`, `operator` and `admin` groups (smsgw.console.roles says what each may do)."""

from django.db import migrations


def roles_create(apps, schema_editor):
    from smsgw.console.roles import roles_sync

    roles_sync(apps, allow_missing=True)  # models added later get their rights in a later migration


def roles_remove(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=["viewer", "operator", "admin"]).delete()

class Migration(migrations.Migration):
    dependencies = [
        ("smsgw", "0003_tenant_quota_policy_api_rate"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("scheduling", "0007_message_sent_lookup_index"),
        ("delivery", "0005_rate_ceiling"),
        ("receipts", "0003_status_lookup"),
        ("limits", "0001_quota_windows_rate_buckets"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
        ("axes", "0010_accessattemptexpiration"),
    ]

    operations = [migrations.RunPython(roles_create, roles_remove)]
