from celery import shared_task

from scheduling.limits.housekeeping import limits_prune
from smsgw.runtime.task_limits import next_tick_goes_on


@shared_task(name="limits.prune", ignore_result=True)
@next_tick_goes_on
def limits_prune_task() -> None:
    limits_prune()
