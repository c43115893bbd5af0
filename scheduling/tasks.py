from __future__ import annotations

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import InterfaceError, OperationalError

from scheduling.campaigns import control as campaign_control
from scheduling.campaigns.make import campaign_fail, campaigns_stale_republish
from scheduling.campaigns.make import campaign_make as campaign_make_run
from scheduling.dispatch.sweep import sweep_for
from scheduling.operator_jobs import runner as operator_jobs
from scheduling.schedules.materialize import materialize_for
from smsgw.runtime.task_limits import next_tick_goes_on


@shared_task(name="scheduling.sweep", ignore_result=True)
@next_tick_goes_on
def sweep() -> None:
    # Slightly shorter than the beat interval so one sweep task is normally running at a time.
    sweep_for(settings.SWEEP_INTERVAL_SECONDS * 0.9, idle_sleep=settings.IDLE_POLL_SECONDS)


@shared_task(name="scheduling.materialize", ignore_result=True)
@next_tick_goes_on
def materialize() -> None:
    # Bounded like the sweep: batches back to back while schedules are due, for most of one interval.
    materialize_for(settings.MATERIALIZE_INTERVAL_SECONDS * 0.9)
    # The same tick re-publishes campaign creation jobs that lost their task (one index probe).
    campaigns_stale_republish()


@shared_task(name="scheduling.campaign_make", ignore_result=True)
def campaign_make(campaign_id: int, range_index: int | None = None) -> None:
    try:
        campaign_make_run(campaign_id, range_index)
    except (OperationalError, InterfaceError, SoftTimeLimitExceeded):
        # The database went away, or the job reached its time limit: the batch in flight rolled back and
        # the checkpoint stands. The job is published again by campaigns_stale_republish (no countdown
        # retry: quorum queues take no ETAs).
        raise
    except Exception:
        # Anything else would fail again from the same checkpoint: say so on the campaign, not for ever
        # in `creating`.
        campaign_fail(campaign_id, "internal error while making the campaign's messages; see the worker log")
        raise


# Campaign control (scheduling.campaigns.control): bounded runs that re-enqueue themselves until done, so
# a 1M-message cancel or resume never holds a worker or one transaction for long.
@shared_task(name="scheduling.campaign_cancel", ignore_result=True)
def campaign_cancel(campaign_id: int) -> None:
    try:
        _, done = campaign_control.cancel_pending(campaign_id, budget=campaign_control.TASK_BUDGET_SECONDS)
    except SoftTimeLimitExceeded:  # what it committed stands; the rest in the next run
        done = False
    if not done:
        campaign_cancel.apply_async(args=(campaign_id,), queue="reconcile")


@shared_task(name="scheduling.campaign_release", ignore_result=True)
def campaign_release(campaign_id: int) -> None:
    try:
        _, done = campaign_control.waiting_release(campaign_id, budget=campaign_control.TASK_BUDGET_SECONDS)
    except SoftTimeLimitExceeded:  # what it committed stands; the rest in the next run
        done = False
    if not done:
        campaign_release.apply_async(args=(campaign_id,), queue="reconcile")


@shared_task(name="scheduling.campaigns_tick", ignore_result=True)
@next_tick_goes_on
def campaigns_tick() -> None:
    campaign_control.campaigns_tick()
    # The same tick publishes again an operator job that lost its task (one index probe).
    operator_jobs.jobs_stale_republish()


# An operator job (the admin's bulk cancel, reschedule or replay over a filter; scheduling.operator_jobs):
# bounded runs of chunks that publish themselves again until done. A run killed mid-chunk loses that
# chunk only (acks_late: the task comes back), and goes on from the last committed cursor.
@shared_task(name="scheduling.operator_job", ignore_result=True)
def operator_job(job_id: int) -> None:
    try:
        done = operator_jobs.job_run(job_id)
    except SoftTimeLimitExceeded:  # what it committed stands; the rest in the next run
        done = False
    if not done:
        operator_jobs.job_enqueue(job_id)
