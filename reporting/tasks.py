from celery import shared_task

from reporting.minutes import console_minutes_record
from smsgw.runtime.task_limits import next_tick_goes_on


@shared_task(name="reporting.console_minutes", ignore_result=True)
@next_tick_goes_on
def console_minutes() -> None:
    console_minutes_record()
