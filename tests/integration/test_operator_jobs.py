"""A bulk replay of failed messages over the admin's filter, run as an operator job by a real celery
worker that is killed with SIGKILL (its whole process group, as the OOM killer or a lost host would)
in the middle of the job. The job is published again (the periodic tick's stale check, run here at once)
and a new worker goes on from the last committed chunk: every message is replayed exactly once, and the
job's counts say so (docs/admin.md, "Bulk jobs"). 2,000 messages every run; the issue's 20,000 in the
long tier."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import Count
from django.test import Client
from django.utils import timezone

from scheduling.models import Message, MessageEvent, OperatorJob, OperatorJobStatus, Status
from scheduling.operator_jobs import runner
from tests import processes
from tests.factories import messages_bulk, tenant_with_key
from tests.harness import fast_env
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def workers(transactional_db):
    """Start celery workers on the reconcile queue (the operator jobs' queue); all stopped at the end."""
    processes.broker_purge()
    connection.close()  # workers are separate processes; do not hold a connection they could wait on
    started: list[processes.Proc] = []

    def start(name: str, chunk: int) -> processes.Proc:
        env = processes.process_env(**fast_env(), SMSGW_OPERATOR_JOB_CHUNK_SIZE=str(chunk))
        proc = processes.celery_worker(name, env, queues="reconcile", concurrency=1)
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        processes.stop_all(started)
        processes.broker_purge()


def _progress(job_id: int) -> tuple[str, int]:
    row = OperatorJob.objects.filter(pk=job_id).values_list("status", "processed").get()
    return row[0], row[1]


def _replay_killed_mid_way_and_resumed(workers, n: int, chunk: int) -> None:
    tenant = tenant_with_key("acme")[0]
    ids = messages_bulk(tenant, n, due_at=timezone.now() - timedelta(minutes=5))
    Message.objects.filter(pk__in=ids).update(
        status=Status.FAILED, run_after=None, attempt_count=5, status_reason="provider outage"
    )
    first = workers("jobs-a", chunk)
    ops = User.objects.create_superuser("ops", "ops@example.com", "pw-for-tests-only")
    client = Client()
    client.force_login(ops)
    answer = client.post(
        "/admin/scheduling/message/?status__exact=failed",
        {
            "action": "replay_messages",
            "select_across": "1",
            "_selected_action": [str(ids[0])],
            "confirm": "yes",
        },
    )
    assert answer.status_code == 302, answer.content[:2000]
    job = OperatorJob.objects.get()
    assert job.total == n
    wait_for(lambda: _progress(job.pk)[1] >= 2 * chunk, 60, "the job's first chunks to commit", interval=0.01)
    first.kill9()
    status, at_kill = _progress(job.pk)
    assert status == OperatorJobStatus.RUNNING and at_kill < n, "the job finished before the kill"
    # What is committed is exactly what the cursor covers: the chunk in flight went with the worker.
    assert Message.objects.filter(pk__in=ids, status=Status.QUEUED).count() == at_kill

    # The killed worker's task went with it (unacknowledged; on Redis back only after the visibility
    # timeout): the tick's stale check publishes the job again. Run here at once, not a minute later.
    workers("jobs-b", chunk)
    later = timezone.now() + timedelta(seconds=settings.OPERATOR_JOB_STALE_SECONDS + 1)
    assert runner.jobs_stale_republish(now=later) == [job.pk]
    wait_for(lambda: _progress(job.pk)[0] == OperatorJobStatus.COMPLETED, 120, "the resumed job to finish")

    job.refresh_from_db()
    assert (job.processed, job.counts, job.cursor) == (n, {"changed": n}, ids[-1])
    per_message = MessageEvent.objects.filter(kind="replayed", message_id__in=ids).values("message_id")
    per_message = per_message.annotate(times=Count("id"))
    assert per_message.count() == n and not per_message.filter(times__gt=1).exists()
    assert Message.objects.filter(pk__in=ids, status=Status.QUEUED, attempt_count=0).count() == n
    print(f"operator job: {n} replays, killed at {at_kill}, resumed and completed exactly once")


def test_a_bulk_replay_job_killed_mid_way_resumes_and_replays_each_message_once(workers):
    _replay_killed_mid_way_and_resumed(workers, 2000, chunk=100)


@pytest.mark.long
@pytest.mark.timeout(900)
def test_a_bulk_replay_of_20000_killed_mid_way_replays_each_message_once(workers):
    _replay_killed_mid_way_and_resumed(workers, 20_000, chunk=500)
