from celery import shared_task
from django.conf import settings

from receipts.lookup import stale_sent_lookup_run
from receipts.processor import receipts_process_for
from receipts.spool import spool_drain
from receipts.webhooks import webhooks_deliver_for


@shared_task(name="receipts.process", ignore_result=True)
def process() -> None:
    # Callbacks spooled during a database outage first, so they are applied in this same run.
    spool_drain()
    receipts_process_for(settings.SWEEP_INTERVAL_SECONDS * 0.9)


@shared_task(name="receipts.status_lookup", ignore_result=True)
def status_lookup() -> None:
    stale_sent_lookup_run()


@shared_task(name="receipts.deliver_webhooks", ignore_result=True)
def deliver_webhooks() -> None:
    webhooks_deliver_for(settings.SWEEP_INTERVAL_SECONDS * 0.9)
