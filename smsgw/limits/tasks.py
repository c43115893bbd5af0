from celery import shared_task

from smsgw.limits.housekeeping import limits_prune


@shared_task(name="limits.prune", ignore_result=True)
def limits_prune_task() -> None:
    limits_prune()
