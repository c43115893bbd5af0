"""A worker keeps its database connection from one task to the next (PostgreSQL). Celery 5.7's Django
fixup would close it before and after every task; config.celery turns that off and closes, as Django
does around a request, only a connection that is broken or older than CONN_MAX_AGE."""

from __future__ import annotations

import pytest
from celery.fixups.django import DjangoWorkerFixup
from django.db import InterfaceError, OperationalError, connection, connections

from config.celery import _task_connections, app
from receipts.tasks import process

# SQLite half too: SQLite connections are not kept between tasks.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sqlite]


def backend_pid() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return cur.fetchone()[0]


def run_tasks(fixup: DjangoWorkerFixup, task, n: int) -> None:
    """The signals a worker sends around each task, in Celery's order (its fixup's handler first)."""
    for _ in range(n):
        fixup.on_task_prerun(sender=task)
        _task_connections(sender=task)
        fixup.on_task_postrun(sender=task)
        _task_connections(sender=task)


@pytest.fixture
def worker_task(settings):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite connections are not kept (CONN_MAX_AGE 0)")
    assert settings.DATABASES["default"]["CONN_MAX_AGE"] > 0
    task = process  # any task: the signals name their sender
    assert not task.request.is_eager
    return DjangoWorkerFixup(app), task


def test_a_worker_keeps_its_connection_across_tasks(worker_task):
    fixup, task = worker_task
    first = backend_pid()
    run_tasks(fixup, task, 50)
    assert backend_pid() == first


def test_a_connection_the_database_dropped_is_replaced_at_the_next_task(worker_task):
    fixup, task = worker_task
    first = backend_pid()
    other = connections.create_connection("default")  # an operator's session, or a failover
    try:
        with other.cursor() as cur:
            # with a timeout, it returns once the backend is gone (not merely signalled)
            cur.execute("SELECT pg_terminate_backend(%s, 10000)", [first])
            assert cur.fetchone()[0]
    finally:
        other.close()
    with pytest.raises((OperationalError, InterfaceError)):
        backend_pid()  # the task that was using it fails, and marks the connection
    run_tasks(fixup, task, 1)
    assert backend_pid() != first
