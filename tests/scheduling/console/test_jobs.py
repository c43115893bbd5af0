"""Bulk actions over the message list's whole filter ("select all"), any number of messages, run as an
operator job (scheduling.operator_jobs): the confirmation counts the filter, the job goes through the
same services as the one-page actions, its page shows progress and the outcome per status, and the
admin's history records who started it and what came of it. A job stopped between chunks goes on from
its cursor and never acts on a message twice (the worker-kill version: tests/integration)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from scheduling.models import Message, MessageEvent, OperatorJob, OperatorJobStatus, Status
from scheduling.operator_jobs import runner
from smsgw.console.roles import roles_sync
from tests.factories import message, messages_bulk, recipient, tenant_with_key

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/scheduling/message/"


@pytest.fixture
def ops(db):
    user = User.objects.create_superuser("ops", "ops@example.com", "pw-for-tests-only")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme", default_timezone="America/New_York")[0]


def _failed(tenant, n: int) -> list[int]:
    ids = messages_bulk(tenant, n, due_at=timezone.now() - timedelta(minutes=5))
    Message.objects.filter(pk__in=ids).update(
        status=Status.FAILED, run_after=None, attempt_count=5, status_reason="retries exhausted"
    )
    return ids


def _across(client: Client, action: str, query: str, **extra):
    """ "Select all" on the list filtered by ``query``, then the action (and its confirmation)."""
    first = Message.objects.order_by("id").values_list("id", flat=True).first()
    data = {"action": action, "select_across": "1", "_selected_action": [str(first)], **extra}
    return client.post(f"{CHANGELIST}?{query}", data, follow="confirm" in extra)


def test_select_all_replay_counts_the_filter_and_runs_as_a_job(
    ops, tenant, django_capture_on_commit_callbacks
):
    failed = _failed(tenant, 600)  # more than a page (100), more than a chunk (250)
    other = message(tenant, to=recipient(9999), due_in=3600)  # scheduled: outside the filter
    page = _across(ops, "replay_messages", "status__exact=failed").content.decode()
    assert "All 600 messages the list's filter matches" in page
    assert "600</strong> will be replayed" in page
    with django_capture_on_commit_callbacks(execute=False) as published:
        done = _across(ops, "replay_messages", "status__exact=failed", confirm="yes")
    assert len(published) == 1  # the job's first run, once the request committed
    job = OperatorJob.objects.get()
    assert (job.kind, job.status, job.total, job.actor) == (
        "replay",
        OperatorJobStatus.RUNNING,
        600,
        "admin:ops",
    )
    assert job.selection["query"] == {"status__exact": ["failed"]}
    assert done.redirect_chain[-1][0] == f"/admin/scheduling/operatorjob/{job.pk}/change/"
    assert Message.objects.filter(pk__in=failed, status=Status.FAILED).count() == 600  # nothing yet

    running = ops.get(f"/admin/scheduling/operatorjob/{job.pk}/change/").content.decode()
    assert "0 of 600 (0%)" in running and 'http-equiv="refresh"' in running  # the page follows it

    assert runner.job_run(job.pk, chunk=250, budget=120) is True
    job.refresh_from_db()
    assert (job.status, job.processed, job.counts, job.cursor) == (
        OperatorJobStatus.COMPLETED,
        600,
        {"changed": 600},
        failed[-1],
    )
    assert Message.objects.filter(pk__in=failed, status=Status.QUEUED, attempt_count=0).count() == 600
    assert MessageEvent.objects.filter(kind="replayed", actor="admin:ops").count() == 600
    assert Message.objects.get(pk=other.pk).status == Status.SCHEDULED
    history = list(
        LogEntry.objects.filter(object_id=str(job.pk)).order_by("id").values_list("change_message", flat=True)
    )
    assert history[0].startswith("replay job over the messages matching status__exact=failed")
    assert history[1] == "completed: Replayed 600."

    shown = ops.get(f"/admin/scheduling/operatorjob/{job.pk}/change/").content.decode()
    assert "600 of 600 (100%)" in shown and "Replayed 600." in shown and "refresh" not in shown
    assert "status__exact=failed" in shown


def test_a_job_goes_on_from_its_cursor_and_never_acts_twice(ops, tenant):
    """Stopped after one chunk (as when its worker dies between chunks), then run again twice (a
    redelivered task beside a re-published one): each message is replayed once."""
    failed = _failed(tenant, 250)
    _across(ops, "replay_messages", "status__exact=failed", confirm="yes")
    job = OperatorJob.objects.get()
    queryset = runner.matching(job)
    assert runner.job_step(job.pk, queryset, chunk=100) == "more"
    job.refresh_from_db()
    assert (job.processed, job.cursor) == (100, failed[99])
    # The first hundred fail again meanwhile (sent and failed): a job that started over would replay them.
    Message.objects.filter(pk__in=failed[:100]).update(status=Status.FAILED, run_after=None)
    assert runner.job_run(job.pk, chunk=100, budget=120) is True
    assert runner.job_run(job.pk, chunk=100, budget=120) is True
    job.refresh_from_db()
    assert (job.status, job.processed, job.counts) == (OperatorJobStatus.COMPLETED, 250, {"changed": 250})
    replays = MessageEvent.objects.filter(kind="replayed").values_list("message_id", flat=True)
    assert sorted(replays) == failed


def test_select_all_cancel_reports_each_status_and_skips_newer_messages(ops, tenant):
    pending = messages_bulk(tenant, 30, due_at=timezone.now() + timedelta(hours=2))
    Message.objects.filter(pk__in=pending[:5]).update(status=Status.SENDING)
    Message.objects.filter(pk__in=pending[5:7]).update(status=Status.CANCELLED, run_after=None)
    _across(ops, "cancel_messages", "", confirm="yes")
    job = OperatorJob.objects.get()
    late = message(tenant, to=recipient(5000), due_in=3600)  # made after the job was asked for
    runner.job_run(job.pk, budget=120)
    job.refresh_from_db()
    assert job.counts == {"changed": 23, "refused:sending": 5, "already:cancelled": 2}
    shown = ops.get(f"/admin/scheduling/operatorjob/{job.pk}/change/").content.decode()
    assert "Cancelled 23; 2 were already cancelled; 5 were already sending." in shown
    assert Message.objects.get(pk=late.pk).status == Status.SCHEDULED


def test_select_all_reschedule_shifts_each_message_by_a_duration(ops, tenant):
    due = (timezone.now() + timedelta(hours=3)).replace(microsecond=0)
    ids = messages_bulk(tenant, 3, due_at=due)
    Message.objects.filter(pk=ids[0]).update(due_at=due + timedelta(minutes=10))
    refused = _across(ops, "reschedule_messages", "", confirm="yes", timezone="UTC").content.decode()
    assert "Give either a new send time or a shift" in refused
    _across(ops, "reschedule_messages", "", confirm="yes", timezone="UTC", shift="1:30:00")
    job = OperatorJob.objects.get()
    assert job.data == {"shift_seconds": 5400}
    runner.job_run(job.pk, budget=120)
    job.refresh_from_db()
    assert job.counts == {"changed": 3}
    dues = dict(Message.objects.filter(pk__in=ids).values_list("id", "due_at"))
    assert dues == {
        ids[0]: due + timedelta(minutes=100),
        ids[1]: due + timedelta(minutes=90),
        ids[2]: due + timedelta(minutes=90),
    }
    assert MessageEvent.objects.filter(kind="rescheduled", actor="admin:ops").count() == 3


def test_the_jobs_are_read_only_and_seen_by_every_role(ops, tenant):
    _failed(tenant, 2)
    _across(ops, "replay_messages", "", confirm="yes")
    job = OperatorJob.objects.get()
    roles_sync(apps)  # a flushed database (an earlier transactional test) lost the migration's groups
    viewer = User.objects.create_user("vera", password="pw-for-tests-only", is_staff=True)
    viewer.groups.add(Group.objects.get(name="viewer"))
    client = Client()
    client.force_login(viewer)
    assert client.get("/admin/scheduling/operatorjob/").status_code == 200
    assert client.get(f"/admin/scheduling/operatorjob/{job.pk}/change/").status_code == 200
    assert ops.post(f"/admin/scheduling/operatorjob/{job.pk}/change/", {}).status_code == 405
    assert ops.get("/admin/scheduling/operatorjob/add/").status_code == 403


def test_a_running_job_without_progress_is_published_again(
    ops, tenant, settings, django_capture_on_commit_callbacks
):
    settings.OPERATOR_JOB_STALE_SECONDS = 60
    _failed(tenant, 2)
    _across(ops, "replay_messages", "", confirm="yes")
    job = OperatorJob.objects.get()
    assert runner.jobs_stale_republish() == []  # it just started
    with django_capture_on_commit_callbacks(execute=False) as published:
        assert runner.jobs_stale_republish(now=timezone.now() + timedelta(seconds=61)) == [job.pk]
    assert len(published) == 1
