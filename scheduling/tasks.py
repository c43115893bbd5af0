from __future__ import annotations

from celery import shared_task
from django.conf import settings

from scheduling.materialize import materialize_for
from scheduling.sweep import sweep_for


@shared_task(name="scheduling.sweep", ignore_result=True)
def sweep() -> None:
    # Slightly shorter than the beat interval so one sweep task is normally running at a time.
    sweep_for(settings.SWEEP_INTERVAL_SECONDS * 0.9)


@shared_task(name="scheduling.materialize", ignore_result=True)
def materialize() -> None:
    # Bounded like the sweep: batches back to back while schedules are due, for most of one interval.
    materialize_for(settings.MATERIALIZE_INTERVAL_SECONDS * 0.9)
