"""Bulk cancel, reschedule and replay over any filter of the message list, as a background job
(docs/admin.md, "Bulk jobs").

The admin's "select all" over a filter starts a job (``job_start``); a worker applies it in chunks
(``job_run``), each message through the same service as the tenant API and the one-page action
(scheduling.console.bulk.outcome_of), so the rules, the compare-and-set and the timeline entry are theirs.

Exactly once, even when a worker dies mid-way: one chunk is one transaction that locks the job's row
(SKIP LOCKED: a second run of the same job finds it busy and leaves), applies its messages in id order
after the job's cursor (keyset pagination), adds their outcomes to the job's counts and moves the cursor.
A worker killed inside a chunk loses the whole chunk (its changes and its cursor roll back together), and
the resumed job (the task redelivered, or published again by the periodic tick when the job shows no
progress) does that chunk again from the committed cursor; a message is never acted on twice, so a
replay sends each failed message once.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.auth.models import AnonymousUser
from django.db import transaction
from django.db.models import QuerySet
from django.test import RequestFactory
from django.utils import timezone

from scheduling.console import bulk
from scheduling.models import Message, OperatorJob, OperatorJobStatus

log = logging.getLogger(__name__)

TASK_BUDGET_SECONDS = 5.0  # one task run, then it publishes itself again: other reconcile work gets turns
BUSY_POLL_SECONDS = 0.2


def describe(query: dict[str, list[str]]) -> str:
    """The filter as an operator reads it: "status__exact=failed, tenant__id__exact=3" or "all messages"."""
    shown = ", ".join(f"{k}={','.join(v)}" for k, v in sorted(query.items()))
    return f"the messages matching {shown}" if shown else "all messages"


def job_start(
    *, kind: str, actor: str, user, query: dict[str, list[str]], data: dict, queryset: QuerySet[Message]
) -> OperatorJob:
    """Record the job (the filter as the changelist had it, bounded to the messages existing now) and
    publish its first run once it commits."""
    now = timezone.now()
    last_id = queryset.order_by("-id").values_list("id", flat=True).first() or 0
    total = queryset.filter(id__lte=last_id).count() if last_id else 0
    job = OperatorJob.objects.create(
        kind=kind,
        actor=actor,
        user=user if getattr(user, "pk", None) else None,
        selection={"query": query, "description": describe(query)},
        data=data,
        last_id=last_id,
        total=total,
        created_at=now,
        updated_at=now,
    )
    log.info("operator job started", extra={"job": job.pk, "kind": kind, "actor": actor, "total": total})
    job_enqueue(job.pk)
    return job


def job_enqueue(job_id: int) -> None:
    from celery import current_app as app  # config.celery's app, current once loaded

    # Its route's queue, named literally (tests/smsgw/runtime/test_queues.py reads every publish).
    transaction.on_commit(lambda: app.send_task("scheduling.operator_job", args=[job_id], queue="reconcile"))


def matching(job: OperatorJob) -> QuerySet[Message]:
    """The messages the job's filter matches, read as the admin's changelist reads its query string (the
    same filters, search and date ranges), by the person who asked."""
    model_admin = admin.site.get_model_admin(Message)
    request = RequestFactory().get("/", data=job.selection.get("query", {}))
    request.user = job.user or AnonymousUser()

    class QueryOnly(model_admin.get_changelist(request)):  # type: ignore[misc]
        def get_results(self, request):  # the page of results (and its count) is not needed here
            self.result_count = self.full_result_count = 0
            self.result_list = []

    list_display = model_admin.get_list_display(request)
    changelist = QueryOnly(
        request,
        Message,
        list_display,
        model_admin.get_list_display_links(request, list_display),
        model_admin.get_list_filter(request),
        model_admin.date_hierarchy,
        model_admin.get_search_fields(request),
        model_admin.get_list_select_related(request),
        model_admin.list_per_page,
        model_admin.list_max_show_all,
        model_admin.list_editable,
        model_admin,
        model_admin.get_sortable_by(request),
        model_admin.search_help_text,
    )
    return changelist.queryset


def job_run(job_id: int, *, budget: float = TASK_BUDGET_SECONDS, chunk: int | None = None) -> bool:
    """Chunks until the job is done or ``budget`` seconds passed; True when there is nothing left for
    this run to do (done, failed, or another run held the job all along)."""
    deadline = time.monotonic() + budget
    try:
        queryset = matching(OperatorJob.objects.select_related("user").get(pk=job_id))
    except OperatorJob.DoesNotExist:
        return True
    except IncorrectLookupParameters as exc:
        job_fail(job_id, f"the filter no longer applies: {exc}")
        return True
    while True:
        # A chunk is one transaction: about 1 ms a message (SMSGW_OPERATOR_JOB_CHUNK_SIZE, default 500),
        # well under a second of row locks; the sweep claims SKIP LOCKED and never waits on it.
        state = job_step(job_id, queryset, chunk=chunk or settings.OPERATOR_JOB_CHUNK_SIZE)
        if state == "done":
            return True
        if time.monotonic() > deadline:
            # Busy all along: another run holds the job and goes on with it (this one is a duplicate).
            return state == "busy"
        if state == "busy":
            # Another run holds the job, or a killed one whose transaction the database has not yet
            # rolled back (moments): try again shortly rather than leave the job to the stale check.
            time.sleep(BUSY_POLL_SECONDS)


def job_step(job_id: int, queryset: QuerySet[Message], *, chunk: int) -> str:
    """One chunk in one transaction: "more", "done", or "busy" (another run holds the job)."""
    with transaction.atomic():
        job = OperatorJob.objects.select_for_update(skip_locked=True).filter(pk=job_id).first()
        if job is None:
            return "busy"
        if job.status != OperatorJobStatus.RUNNING:
            return "done"
        op = bulk.OPERATIONS[job.kind]
        rows = list(
            queryset.filter(id__gt=job.cursor, id__lte=job.last_id)
            .select_related("tenant")
            .order_by("id")[:chunk]
        )
        now = timezone.now()
        if not rows:
            _finish(job, now)
            return "done"
        counts: Counter[str] = Counter(job.counts)
        for message in rows:
            # A savepoint each: a database error on one message rolls back that message only when caught
            # below it; outcome_of itself turns the services' refusals into outcomes.
            with transaction.atomic():
                counts[bulk.outcome_of(op, message, job.actor, job.data)] += 1
        job.counts = dict(counts)
        job.cursor = rows[-1].pk
        job.processed += len(rows)
        job.updated_at = now
        job.save(update_fields=["counts", "cursor", "processed", "updated_at"])
    return "more"


def _finish(job: OperatorJob, now: datetime) -> None:
    op = bulk.OPERATIONS[job.kind]
    job.status = OperatorJobStatus.COMPLETED
    job.finished_at = job.updated_at = now
    job.save(update_fields=["status", "finished_at", "updated_at"])
    outcome = bulk.counts_text(op, job.counts)
    _audit(job, f"completed: {outcome}")
    log.info("operator job completed", extra={"job": job.pk, "kind": job.kind, "counts": job.counts})


def job_fail(job_id: int, reason: str) -> None:
    with transaction.atomic():
        job = OperatorJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.status != OperatorJobStatus.RUNNING:
            return
        job.status, job.error = OperatorJobStatus.FAILED, reason[:255]
        job.finished_at = job.updated_at = timezone.now()
        job.save(update_fields=["status", "error", "finished_at", "updated_at"])
        _audit(job, f"failed: {job.error}")
    log.warning("operator job failed", extra={"job": job_id})


def _audit(job: OperatorJob, text: str) -> None:
    """The admin's history (LogEntry) of the job, beside its "started" entry: by the person who asked."""
    if job.user_id is None:
        return
    LogEntry.objects.log_actions(
        user_id=job.user_id, queryset=[job], action_flag=CHANGE, change_message=text, single_object=True
    )


def jobs_stale_republish(*, now: datetime | None = None) -> list[int]:
    """Publish again every running job that committed no chunk for OPERATOR_JOB_STALE_SECONDS (its task
    was lost with its worker); one probe of the opjob_running index."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.OPERATOR_JOB_STALE_SECONDS)
    stale = list(
        OperatorJob.objects.filter(status=OperatorJobStatus.RUNNING, updated_at__lt=cutoff).values_list(
            "pk", flat=True
        )[:100]
    )
    if stale:
        OperatorJob.objects.filter(pk__in=stale).update(updated_at=now)  # once per stale period
        for pk in stale:
            job_enqueue(pk)
        log.warning("operator jobs re-published: %d without progress", len(stale))
    return stale


__all__ = [
    "describe",
    "job_enqueue",
    "job_fail",
    "job_run",
    "job_start",
    "job_step",
    "jobs_stale_republish",
    "matching",
]
