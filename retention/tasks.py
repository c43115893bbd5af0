from celery import shared_task

from retention.jobs import retention_run
from smsgw.runtime.task_limits import next_tick_goes_on


@shared_task(name="retention.run", ignore_result=True)
@next_tick_goes_on
def run() -> None:
    retention_run()
