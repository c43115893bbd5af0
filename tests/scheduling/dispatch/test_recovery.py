"""Re-publication of stale `queued` rows, against the real broker of the run (the embedded filesystem
transport on SQLite, Redis in CI): only what the broker lost is re-published, once, with the reason."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from scheduling.dispatch import recovery, release, sweep
from scheduling.models import Message, Status
from smsgw.runtime.broker import queue_depths
from tests.factories import message, tenant_with_key

# SQLite half too: lost tasks are found on the filesystem broker too.
pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


@pytest.fixture(autouse=True)
def _publish(django_capture_on_commit_callbacks):
    """The send tasks are published after commit: run those callbacks as a real commit would."""
    global _capture
    _capture = django_capture_on_commit_callbacks
    yield


_capture = None


def sweep_pass():
    with _capture(execute=True):
        return sweep.sweep_once()


def release_pass():
    with _capture(execute=True):
        return release.due_release(limit=100)


def released(tenant, n=1, **kw) -> list[Message]:
    """Messages the sweep released: `queued`, their send tasks in the broker (no worker takes them)."""
    msgs = [message(tenant, due_in=-1, **kw) for _ in range(n)]
    assert sum(release_pass().queued.values()) == n
    return msgs


def settle(msgs) -> None:
    """Back to what a release leaves (the first epoch check of a fresh broker marks everything)."""
    Message.objects.filter(pk__in=[m.pk for m in msgs]).update(
        reason_code="", status_reason="", run_after=timezone.now() + timedelta(seconds=100)
    )


def age(msgs, published_seconds_ago: float) -> None:
    """As if their recovery window had passed, their task published that long ago."""
    now = timezone.now()
    Message.objects.filter(pk__in=[m.pk for m in msgs]).update(
        run_after=now - timedelta(seconds=1), published_at=now - timedelta(seconds=published_seconds_ago)
    )


def republished(m) -> list[dict]:
    return list(m.events.filter(kind="republished").values_list("details", flat=True))


def test_a_stale_row_whose_task_waits_behind_a_backlog_is_not_republished(tenant):
    msgs = released(tenant, 3)
    assert queue_depths(["send.transactional"])["send.transactional"] >= 1
    age(msgs, settings.QUEUED_RECOVERY_SECONDS + 5)
    report = release_pass()
    assert report.republished == 0 and report.recovery_deferred == 3
    for m in msgs:
        m.refresh_from_db()
        assert m.status == Status.QUEUED and m.run_after > timezone.now() + timedelta(seconds=60)
        assert republished(m) == [], "no entry while the task is most likely still waiting"


def test_a_stale_row_in_an_empty_queue_is_republished_once_with_why(tenant):
    from tests.processes import broker_purge

    msgs = released(tenant, 2)
    broker_purge()  # the tasks are gone
    age(msgs, settings.QUEUED_RECOVERY_SECONDS + 5)
    assert release_pass().republished == 2
    assert queue_depths(["send.transactional"])["send.transactional"] >= 1, "published again"
    for m in msgs:
        m.refresh_from_db()
        (entry,) = republished(m)
        assert "task was lost" in entry["reason"] and m.published_at > timezone.now() - timedelta(seconds=5)
    # Its new task now waits in the broker: the next window passes without another entry.
    age(msgs, settings.QUEUED_RECOVERY_SECONDS + 5)
    assert release_pass().republished == 0
    assert all(len(republished(m)) == 1 for m in msgs)


def test_behind_a_backlog_for_longer_than_the_maximum_wait_it_is_republished(tenant):
    (m,) = released(tenant, 1)
    age([m], settings.REPUBLISH_MAX_WAIT_SECONDS + 5)
    assert release_pass().republished == 1
    (entry,) = republished(m)
    assert entry["reason"].startswith("not claimed")


def test_rows_whose_queue_is_empty_are_marked_lost_after_a_short_wait_not_the_window(tenant):
    from tests.processes import broker_purge

    old = released(tenant, 2)
    fresh = released(tenant, 1)
    broker_purge()
    now = timezone.now()
    # Published 20 s ago (past TASK_LOST_AFTER, far from the 120-s window) and 1 s ago.
    Message.objects.filter(pk__in=[m.pk for m in old]).update(published_at=now - timedelta(seconds=20))
    Message.objects.filter(pk__in=[m.pk for m in fresh]).update(published_at=now - timedelta(seconds=1))
    if settings.CELERY_BROKER_URL.startswith("redis"):
        recovery._last_check = 0.0
        recovery.lost_tasks_mark(timezone.now())  # the flushed broker: its epoch check is a separate test
        settle(old + fresh)
    recovery._last_check = 0.0
    assert recovery.lost_tasks_mark(timezone.now()) == 2
    report = sweep_pass()
    assert report.republished == 2
    for m in old:
        m.refresh_from_db()
        assert m.status == Status.QUEUED and m.reason_code == "" and len(republished(m)) == 1
    fresh[0].refresh_from_db()
    assert republished(fresh[0]) == [] and fresh[0].run_after > timezone.now()


@pytest.mark.skipif(not settings.CELERY_BROKER_URL.startswith("redis"), reason="Redis broker only")
def test_a_redis_that_restarted_empty_has_every_published_row_republished_at_once(tenant):
    import redis

    msgs = released(tenant, 3)
    recovery._last_check = 0.0
    recovery.lost_tasks_mark(timezone.now())  # the epoch key exists from now on
    settle(msgs)
    recovery._last_check = 0.0
    assert recovery.lost_tasks_mark(timezone.now()) == 0, "the broker has them"
    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()  # what a restart without persistence does
    released(tenant, 1)  # a new task in the empty broker: the queue is not empty any more
    recovery._last_check = 0.0
    assert recovery.lost_tasks_mark(timezone.now()) == 4
    report = sweep_pass()
    assert report.republished == 4
    for m in msgs:
        (entry,) = republished(m)
        assert "restarted empty" in entry["reason"]
    recovery._last_check = 0.0
    assert recovery.lost_tasks_mark(timezone.now()) == 0, "one restart, one re-publication"


def test_a_message_made_due_again_without_a_task_is_released_at_once_even_behind_a_backlog(tenant):
    """A retry after reconciliation (or a hold released) is `queued` with no task anywhere: it is not
    taken for a task waiting behind the backlog, and goes at the next pass."""
    from scheduling.lifecycle import transitions

    waiting, retry = released(tenant, 2)
    transitions.transition(
        retry.pk, from_statuses=[Status.QUEUED], to_status=Status.SENDING, kind="attempt_started"
    )
    transitions.transition(
        retry.pk,
        from_statuses=[Status.SENDING],
        to_status=Status.QUEUED,
        kind="reconciled_absent",
        set_fields={"run_after": timezone.now(), "reason_code": ""},
    )
    retry.refresh_from_db()
    assert retry.published_at is None
    age([waiting], settings.QUEUED_RECOVERY_SECONDS + 5)
    report = release_pass()
    assert report.republished == 1 and report.recovery_deferred == 1
    retry.refresh_from_db()
    assert retry.published_at is not None and len(republished(retry)) == 1
    assert "reason" not in republished(retry)[0], "not a lost task: just its turn"


def test_a_queue_emptied_a_moment_ago_is_not_taken_for_lost_until_it_stays_empty(tenant, settings):
    """A worker that has just taken the tasks off the queue (reserved, not yet claimed: seconds on a loaded
    machine) leaves the queue empty while the rows are still `queued`. Neither the recovery window nor
    the lost-task check re-publishes them until the queue has stayed empty for TASK_LOST_AFTER."""
    from tests.processes import broker_purge

    msgs = released(tenant, 2)
    age(msgs, settings.QUEUED_RECOVERY_SECONDS + 60)
    assert release_pass().recovery_deferred == 2  # behind a backlog: this process saw it
    broker_purge()  # a worker took the tasks
    if settings.CELERY_BROKER_URL.startswith("redis"):
        import redis

        # The purge also took the sweep's epoch key; a worker taking tasks does not (the restart check is
        # a test of its own).
        redis.Redis.from_url(settings.CELERY_BROKER_URL).set(recovery.EPOCH_KEY, "kept")
    age(msgs, settings.QUEUED_RECOVERY_SECONDS + 60)
    report = release_pass()
    assert report.republished == 0 and report.recovery_deferred == 2
    recovery._last_check = 0.0
    assert recovery.lost_tasks_mark(timezone.now()) == 0, "emptied a moment ago"
    assert all(republished(m) == [] for m in msgs)
    # The queue stays empty for the whole wait (the clock this process keeps, moved back by it): lost.
    queue = recovery.send_queue(msgs[0].priority)
    recovery._backlog_seen[queue] -= settings.TASK_LOST_AFTER_SECONDS
    age(msgs, settings.QUEUED_RECOVERY_SECONDS + 60)
    assert release_pass().republished == 2
    for m in msgs:
        (entry,) = republished(m)
        assert "task was lost" in entry["reason"]
