from celery import shared_task
from django.conf import settings

from inbound.process import inbound_process_for
from inbound.spool import spool_drain
from smsgw.runtime.task_limits import next_tick_goes_on


@shared_task(name="inbound.process", ignore_result=True)
@next_tick_goes_on
def process() -> None:
    # Messages spooled during a database outage first, so they are processed in this same run.
    spool_drain()
    inbound_process_for(settings.SWEEP_INTERVAL_SECONDS * 0.9, idle_sleep=settings.IDLE_POLL_SECONDS)
