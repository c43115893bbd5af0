from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('inbound', '0001_initial'),
        ('smsgw', '0017_tenant_sender_pool'),
    ]

    operations = [
        migrations.CreateModel(
            name='UnroutedInbound',
            fields=[
            ],
            options={
                'verbose_name': 'unrouted inbound message',
                'proxy': True,
                'indexes': [],
                'constraints': [],
            },
            bases=('inbound.inboundmessage',),
        ),
        migrations.AddIndex(
            model_name='inboundmessage',
            index=models.Index(condition=models.Q(('state', 'pending'), _negated=True), fields=['received_at'], name='inbound_processed'),
        ),
        migrations.AddIndex(
            model_name='inboundmessage',
            index=models.Index(condition=models.Q(models.Q(('state', 'pending'), _negated=True), models.Q(('from_number__contains', '*'), _negated=True)), fields=['received_at'], name='inbound_content_held'),
        ),
        migrations.AddIndex(
            model_name='inboundmessage',
            index=models.Index(condition=models.Q(('needs_review', True)), fields=['received_at'], name='inbound_review'),
        ),
    ]
