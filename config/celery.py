import logging
import os
import signal
import threading

from celery import Celery
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    before_task_publish,
    celeryd_after_setup,
    celeryd_init,
    task_postrun,
    task_prerun,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_shutting_down,
)
from kombu.utils.objects import cached_property

from smsgw.observability.consumers import QueueConsumerHeartbeat
from smsgw.runtime.broker import published_at_stamp
from smsgw.runtime.transports import transports_register

# The settings module: config.settings, the project's settings package (split by concern).
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Before any connection: kombu's filesystem and Redis schemes resolve to smsgw's transports (atomic
# publish, bad messages set aside instead of stopping the worker, two Redis fault fixes).
transports_register()


class App(Celery):
    @cached_property
    def Beat(self):
        """``celery beat`` with a stop that cannot hang on the database (smsgw.runtime.beat says why)."""
        # Celery resolves a "module:attr" name here (symbol_by_name), as its own Beat property does; the
        # stubs accept only a class.
        return self.subclass_with_self("smsgw.runtime.beat:Beat")  # type: ignore[arg-type]


app = App("smsgw")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Database connections live across tasks, as CONN_MAX_AGE says (_task_connections below). Celery 5.7's
# Django fixup closes every connection before and after every task whatever CONN_MAX_AGE says (it stopped
# honouring it in celery/celery#9824), so each task opened a new PostgreSQL connection: under `bench
# soak` some 30 new backends a second, about a third of the machine's CPU (their fork, authentication
# and first statements). CELERY_DB_REUSE_MAX is the fixup's own knob: it closes only every that many
# tasks, here never.
app.conf.update(CELERY_DB_REUSE_MAX=2**62)
app.autodiscover_tasks()
# Every worker of this app records the queues it consumes (/readyz, /metrics: smsgw.observability.queues).
app.steps["worker"].add(QueueConsumerHeartbeat)
# Every task message carries its publish instant: /metrics reads the age of each queue's oldest message
# from it (smsgw.runtime.broker.queue_oldest_ages). weak=False: the receiver is a module function, kept.
before_task_publish.connect(published_at_stamp, weak=False)


@celeryd_init.connect
def _check_role(options=None, conf=None, **_kwargs) -> None:
    # Before the worker connects or forks: a host missing a setting this worker's role needs stops here
    # (smsgw.runtime.roles). SystemExit passes through Celery's signal dispatch, which catches only Exception.
    from smsgw.runtime import roles

    queues = roles.queues_of(options or {}, conf)
    roles.check_worker(queues)
    global _send_concurrency_line
    _send_concurrency_line = roles.send_concurrency_at_start(queues, options or {})


_send_concurrency_line: str | None = None


@celeryd_after_setup.connect
def _log_send_concurrency(**_kwargs) -> None:
    """Once per send worker, with logging set up and before its pool forks: its requests in flight per
    process and where the number came from."""
    if _send_concurrency_line:
        logging.getLogger("smsgw.runtime.roles").info("%s", _send_concurrency_line)


@worker_init.connect
def _health_checked_connections(**_kwargs) -> None:
    """In a worker (before its pool forks), a connection kept from an earlier task is checked once before
    a task uses it (Django's CONN_HEALTH_CHECKS: one ``SELECT 1``), so one the database dropped while
    the worker was idle (a restart, a failover) is replaced instead of failing the task. The web keeps
    Django's default (a request that finds a dead connection fails and the next gets a new one): a
    check per callback would be a second round trip on the lightest endpoint."""
    from django.conf import settings

    for database in settings.DATABASES.values():
        database["CONN_HEALTH_CHECKS"] = True


@task_prerun.connect
@task_postrun.connect
def _task_connections(sender=None, **_kwargs) -> None:
    """Around every task, what Django does around every request: close the connections that are
    broken (an error left them unusable) or older than CONN_MAX_AGE, and keep the others. Not for an
    eager task (tests): it runs inside its caller's transaction."""
    if sender is not None and getattr(sender.request, "is_eager", False):
        return
    from django.db import close_old_connections

    close_old_connections()


@worker_process_init.connect
def _own_process_group(**_kwargs) -> None:
    """Each pool child leaves its parent's process group. A stop signal sent to the whole group (Ctrl-C
    in a terminal, honcho, ``kill -TERM -<pgid>`` of deploy/run-embedded.sh) then reaches only the Celery
    parent, which drains its children (warm shutdown: they finish their task and exit on the pool's
    sentinel). Signalled directly, a child dies mid-task, and one killed while writing to billiard's
    result queue holds its lock: its siblings then block for ever in their own exit (seen: the embedded
    worker still running 90 s after SIGTERM to its group). The parent still stops its children by pid
    (cold shutdown, time limits), and the kernel kills them if the parent dies (Celery sets
    PR_SET_PDEATHSIG to SIGKILL). systemd units use KillMode=mixed for the same reason."""
    os.setpgid(0, 0)


@worker_process_init.connect
def _tracing_after_fork(**_kwargs) -> None:
    """Each pool child makes its own tracer provider (smsgw.tracing; nothing when tracing is off): the
    exporter's thread is not inherited through a fork. Its flush is connected here, in the child, so that
    it runs after every handler connected at import (delivery's: the requests in flight land first, and
    their spans end)."""
    from smsgw import tracing

    if tracing.enabled():
        tracing.setup("worker")
        worker_process_shutdown.connect(_tracing_flush, weak=False, dispatch_uid="smsgw.tracing.flush")


def _tracing_flush(**_kwargs) -> None:
    """A pool child about to exit (replaced after its task limit, or the worker stopping): its spans are
    exported now. It leaves by os._exit, which runs no atexit handler, and what the exporter still held
    was lost (opentelemetry-python-contrib #4916)."""
    from smsgw import tracing

    tracing.shutdown()


@worker_shutting_down.connect
def _warm_shutdown_bounded(how=None, **_kwargs) -> None:
    """A warm shutdown (SIGTERM) that has not ended after ``SMSGW_WORKER_STOP_SECONDS`` becomes a cold one,
    as a second Ctrl-C would make it. Celery waits for every running task without a limit, and a task
    blocked on a database that accepts packets but never answers (a frozen server, a stalled proxy: no
    error reaches the connection) would hold the stop until the service manager's SIGKILL (seen: more
    than 45 s). Cold, the pool's children are terminated; their tasks were not acknowledged (acks_late)
    and the rows they held are taken again by the sweep's recovery, so nothing is lost."""
    if how != "Warm":
        return
    from django.conf import settings

    def cold() -> None:
        logging.getLogger("smsgw.celery").warning(
            "worker: warm shutdown still waiting for running tasks after %g s; shutting down cold",
            settings.WORKER_STOP_SECONDS,
        )
        os.kill(os.getpid(), signal.SIGQUIT)  # Celery's cold shutdown

    timer = threading.Timer(settings.WORKER_STOP_SECONDS, cold)
    timer.daemon = True
    timer.start()


@after_setup_logger.connect
@after_setup_task_logger.connect
def _quiet_logs(logger=None, **_kwargs) -> None:
    """Workers and beat: a repeated error once per window, no INFO line per periodic tick, and every line
    redacted (no body, number, metadata value or secret; smsgw.runtime.logs.Redact)."""
    from smsgw.runtime.logs import handlers_quiet
    from smsgw.runtime.logs_json import handlers_format

    handlers_quiet(logger)
    handlers_format(logger)
