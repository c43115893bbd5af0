import os

from celery import Celery
from celery.signals import after_setup_logger, after_setup_task_logger, celeryd_init, worker_process_init
from kombu.utils.objects import cached_property

from smsgw.transports import transports_register

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smsgw.settings")
# Before any connection: kombu's filesystem and Redis schemes resolve to smsgw's transports (atomic
# publish, bad messages set aside instead of stopping the worker, two Redis fault fixes).
transports_register()


class App(Celery):
    @cached_property
    def Beat(self):
        """``celery beat`` with a stop that cannot hang on the database (smsgw.beat says why)."""
        return self.subclass_with_self("smsgw.beat:Beat")


app = App("smsgw")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@celeryd_init.connect
def _check_role(options=None, conf=None, **_kwargs) -> None:
    # Before the worker connects or forks: a host missing a setting this worker's role needs stops here
    # (smsgw.roles). SystemExit passes through Celery's signal dispatch, which catches only Exception.
    from smsgw import roles

    roles.check_worker(roles.queues_of(options or {}, conf))


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


@after_setup_logger.connect
@after_setup_task_logger.connect
def _quiet_logs(logger=None, **_kwargs) -> None:
    """Workers and beat: a repeated error once per window, no INFO line per periodic tick, and every line
    redacted (no body, number, metadata value or secret; smsgw.logs.Redact)."""
    from smsgw.logs import handlers_quiet
    from smsgw.logs_json import handlers_format

    handlers_quiet(logger)
    handlers_format(logger)
