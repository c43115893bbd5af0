from celery import shared_task
from django.conf import settings

from receipts.lookup import stale_sent_lookup_run
from receipts.processor import receipts_process_for
from receipts.spool import spool_drain
from receipts.webhooks import webhooks_deliver_for
from smsgw.runtime.task_limits import next_tick_goes_on


@shared_task(name="receipts.process", ignore_result=True)
@next_tick_goes_on
def process() -> None:
    # Callbacks spooled during a database outage first, so they are applied in this same run.
    spool_drain()
    receipts_process_for(settings.SWEEP_INTERVAL_SECONDS * 0.9, idle_sleep=settings.IDLE_POLL_SECONDS)


@shared_task(name="receipts.status_lookup", ignore_result=True)
@next_tick_goes_on
def status_lookup() -> None:
    stale_sent_lookup_run()


@shared_task(name="receipts.deliver_webhooks", ignore_result=True)
@next_tick_goes_on
def deliver_webhooks() -> None:
    webhooks_deliver_for(settings.SWEEP_INTERVAL_SECONDS * 0.9)
