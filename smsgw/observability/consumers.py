"""Each Celery worker's main process says, every SMSGW_QUEUE_CONSUMER_HEARTBEAT_SECONDS, which queues it
consumes (smsgw.observability.queues reads it for /readyz and /metrics). Registered as a worker bootstep
on the app (config.celery), so every ``celery -A config worker`` records it, whatever starts it (systemd,
the Procfile, the embedded run, the tests).

The write runs in a daemon thread, not on Celery's timer: the timer runs in the consumer's event loop,
where a slow or unreachable database (libpq's connect timeout is 5 s) would stop the worker fetching
tasks. The thread holds no database connection between beats (a forked pool child must not inherit one
in use), and a failed beat costs a figure, not a task.

A queue counts as consumed only while the worker's consumer holds a broker connection and has a
consumer on that queue (kombu ``Consumer.consuming_from``): while the worker reconnects to the broker its
rows say stopped instead of claiming a consumer that fetches nothing, and until it consumes (starting,
reconnecting) it looks again every second rather than every beat, so a new worker shows within a second
of its first fetch. ``celery control add_consumer`` / ``cancel_consumer`` show at the next beat. On a
warm or cold shutdown the worker's rows are marked stopped (after its task consumer stopped: Celery's
Consumer step is always the last to start and the first to stop); a worker killed outright is noticed
when its rows go stale. A worker that consumes but is slow or stuck still counts: that is a backlog, which
the lateness figures (due age, receipts lag, webhook outbox age) and their alerts report.

Each beat also records the worker's pool: its processes and how many run a task at that instant (worker
utilisation, ``smsgw_worker_busy_processes`` / ``smsgw_worker_processes``). One sample per beat: averaged
over a few minutes of scrapes, it estimates the busy share without a figure per task.
"""

from __future__ import annotations

import logging
import threading
import time

from celery import bootsteps

log = logging.getLogger(__name__)

STOP_WAIT_SECONDS = 3.0  # a shutdown waits this long at most for the goodbye write
PRUNE_EVERY_SECONDS = 3600.0
NOT_CONSUMING_LOOK_SECONDS = 1.0


def consumed_queues(worker) -> list[str]:
    """The queues ``worker`` (a celery WorkController) fetches from right now."""
    consumer = getattr(worker, "consumer", None)
    if consumer is None or consumer.connection is None:
        return []  # not started yet, or reconnecting to the broker: fetching nothing
    tasks = consumer.task_consumer
    if tasks is None:
        return []
    return sorted(q.name for q in tasks.queues if tasks.consuming_from(q.name))


def pool_usage(worker) -> tuple[int, int]:
    """``worker``'s pool processes (threads, for a threads pool) and how many run a task right now: the
    tasks the pool has accepted (celery.worker.state.active_requests, kept by this main process)."""
    from celery.worker import state as worker_state

    pool = getattr(worker, "pool", None)
    try:
        processes = int(getattr(pool, "num_processes", None) or getattr(pool, "limit", None) or 0)
    except (AttributeError, TypeError, ValueError):  # a prefork pool not started yet, or stopping
        processes = 0
    processes = processes or int(getattr(worker, "concurrency", 0) or 0)
    return processes, min(len(worker_state.active_requests), processes)


class QueueConsumerHeartbeat(bootsteps.StartStopStep):
    label = "smsgw queue consumer heartbeat"
    # Started once the pool has forked its first children: a thread running while a process forks is
    # the fork-with-threads hazard (a lock held by the thread stays held in the child). Later forks (a
    # child replaced at its memory limit) can still meet the thread, which is why it takes no lock a
    # child reuses: its own database connection, and the logging lock only when a beat fails (logging
    # re-creates its locks in a forked child).
    requires = ("celery.worker.components:Pool",)

    def __init__(self, worker, **kwargs):
        super().__init__(worker, **kwargs)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, worker):
        self._thread = threading.Thread(
            target=self._run, args=(worker,), name="smsgw-queue-consumer-heartbeat", daemon=True
        )
        self._thread.start()

    def stop(self, worker):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(STOP_WAIT_SECONDS)

    terminate = stop  # a cold shutdown says goodbye too (StartStopStep.terminate only stops self.obj)

    def _run(self, worker):
        from django.conf import settings

        interval = settings.QUEUE_CONSUMER_HEARTBEAT_SECONDS
        next_prune = 0.0
        while not self._stop.is_set():
            try:
                queues = consumed_queues(worker)
            except RuntimeError:  # the consumer's thread changed its queues as we read them (add_consumer)
                self._stop.wait(NOT_CONSUMING_LOOK_SECONDS)
                continue
            prune = time.monotonic() >= next_prune
            if self._beat(worker, queues, prune=prune) and prune:
                next_prune = time.monotonic() + PRUNE_EVERY_SECONDS
            self._stop.wait(interval if queues else min(interval, NOT_CONSUMING_LOOK_SECONDS))
        self._goodbye(worker)

    def _beat(self, worker, queues: list[str], *, prune: bool) -> bool:
        from django.db import connection

        from smsgw.observability.queues import queue_consumers_prune, queue_consumers_record

        try:
            processes, busy = pool_usage(worker)
            queue_consumers_record(hostname=worker.hostname, queues=queues, processes=processes, busy=busy)
            if prune:
                queue_consumers_prune()
            return True
        except Exception as exc:  # the database is down or slow: the rows go stale, the worker goes on
            log.warning("queue consumer heartbeat not recorded: %s", type(exc).__name__)
            return False
        finally:
            connection.close()

    def _goodbye(self, worker):
        from django.db import connection

        from smsgw.observability.queues import queue_consumers_stop

        try:
            queue_consumers_stop(hostname=worker.hostname)
        except Exception as exc:  # the rows go stale instead
            log.warning("queue consumer goodbye not recorded: %s", type(exc).__name__)
        finally:
            connection.close()
