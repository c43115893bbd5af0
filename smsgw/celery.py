import os

from celery import Celery
from celery.signals import after_setup_logger, after_setup_task_logger, celeryd_init, worker_process_init

from smsgw.observability.consumers import QueueConsumerHeartbeat

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smsgw.settings")

app = Celery("smsgw")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Every worker of this app records the queues it consumes (/readyz, /metrics: smsgw.observability.queues).
app.steps["worker"].add(QueueConsumerHeartbeat)


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


def _redis_ack_releases_its_slot() -> None:
    """kombu's Redis QoS removes an acknowledged message from its Redis indices and only then frees the
    prefetch slot it held (kombu/transport/redis.py, QoS.ack: ``_remove_from_indices(...).execute()``
    then ``super().ack``). When that Redis call fails (the link was cut while the task ran), the slot is
    never freed: kombu's Message.ack_log_error logs "Couldn't ack" and swallows the error, and a worker
    whose slots have all leaked never fetches again (the stall in celery/celery#8030, #8091, #3773;
    seen here after a 30-s link cut). The slot is freed whatever Redis answered; the message stays in
    Redis's unacked index and is restored after the visibility timeout, and every task here is
    idempotent on the rows' state, so the copy finds nothing to do."""
    from kombu.transport import redis as kombu_redis
    from kombu.transport import virtual

    qos = kombu_redis.QoS
    if getattr(qos, "_smsgw_slot_release", False):
        return
    original_ack, original_reject = qos.ack, qos.reject

    def ack(self, delivery_tag):
        try:
            original_ack(self, delivery_tag)
        except Exception:
            virtual.QoS.ack(self, delivery_tag)
            raise

    def reject(self, delivery_tag, requeue=False):
        try:
            original_reject(self, delivery_tag, requeue=requeue)
        except Exception:
            virtual.QoS.ack(self, delivery_tag)  # frees the slot; the message stays in Redis's index
            raise

    qos.ack, qos.reject = ack, reject
    qos._smsgw_slot_release = True


_redis_ack_releases_its_slot()


def _redis_close_after_collect() -> None:
    """A worker whose broker died closes the broken connection after ``collect()`` has already detached
    its transport (celery consumer.on_connection_error_after_connected); closing the channel then tries
    to restore unacked messages through a client it can no longer build (kombu redis
    ``Channel._connparams``: ``conninfo.hostname`` on None), an AttributeError that ``ignore_errors`` does
    not catch: "Unrecoverable error" and the worker exits. Raised as a connection error instead, it is
    ignored like any other failure to close a dead connection; the unacked messages stay in Redis's
    index and are restored after the visibility timeout (or were lost with a Redis restarted empty)."""
    import redis
    from kombu.transport import redis as kombu_redis

    channel = kombu_redis.Channel
    if getattr(channel, "_smsgw_close_after_collect", False):
        return
    original = channel._connparams

    def _connparams(self, *args, **kwargs):
        if self.connection.client is None:
            raise redis.exceptions.ConnectionError("broker connection already collected")
        return original(self, *args, **kwargs)

    channel._connparams = _connparams
    channel._smsgw_close_after_collect = True


_redis_close_after_collect()
