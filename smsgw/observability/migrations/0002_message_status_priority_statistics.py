"""Multivariate statistics on scheduling_message (status, priority), for reporting.state.

The state collector reports large counts as the planner's estimate. Without these statistics the planner
multiplies the two columns' frequencies as if they were independent; they are not (bulk traffic is most
of the delivered rows, transactional most of what is in flight), and the estimate was 15-20 % off at a
million rows. An MCV list over the pair lets ANALYZE store the combined frequencies. PostgreSQL only.
Kept in this app (not in scheduling) because only the metrics need it.
"""

from django.db import migrations


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "CREATE STATISTICS IF NOT EXISTS msg_status_priority_stats (mcv) "
            "ON status, priority FROM scheduling_message"
        )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP STATISTICS IF EXISTS msg_status_priority_stats")


class Migration(migrations.Migration):
    dependencies = [
        ("observability", "0001_initial"),
        ("scheduling", "0007_message_sent_lookup_index"),
    ]

    operations = [migrations.RunPython(create, drop, elidable=False)]
