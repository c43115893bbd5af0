from celery import shared_task
from django.conf import settings

from receipts.processor import receipts_process_for
from receipts.webhooks import webhooks_deliver_for


@shared_task(name="receipts.process", ignore_result=True)
def process() -> None:
    receipts_process_for(settings.SWEEP_INTERVAL_SECONDS * 0.9)


@shared_task(name="receipts.deliver_webhooks", ignore_result=True)
def deliver_webhooks() -> None:
    webhooks_deliver_for(settings.SWEEP_INTERVAL_SECONDS * 0.9)
