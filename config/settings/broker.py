"""Celery and its broker: the embedded filesystem transport, Redis or RabbitMQ, and the worker settings."""

from __future__ import annotations

from config.settings.environment import PRODUCTION, VAR_DIR
from smsgw.config import security
from smsgw.config.env import env_bool, env_choice, env_float, env_int, env_secret

# --- Celery ---------------------------------------------------------------------------------------
# The broker: redis://host:6379/0 or amqp://user:password@host:5672/vhost (RabbitMQ, docs/deploy.md);
# unset, kombu's filesystem transport in the var folder (the embedded mode, one host only).
CELERY_BROKER_URL = env_secret("CELERY_BROKER_URL", "filesystem://")
security.placeholders_refuse(PRODUCTION, CELERY_BROKER_URL=CELERY_BROKER_URL)  # an example's password left in
BROKER_IS_FILESYSTEM = CELERY_BROKER_URL.startswith("filesystem")
if BROKER_IS_FILESYSTEM:
    # smsgw.runtime.transports.FilesystemTransport: messages are written whole in tmp/ and renamed into out/,
    # a consumer renames the one it takes into claimed/, and a file it cannot read goes to bad/.
    _broker_dir = VAR_DIR / "broker"
    for _folder in ("out", "tmp", "claimed", "bad", "processed", "control"):
        (_broker_dir / _folder).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "out"),
        "data_folder_out": str(_broker_dir / "out"),
        "processed_folder": str(_broker_dir / "processed"),
        # Exchange bindings; kombu would otherwise write them to ./control in the working directory.
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
        "polling_interval": 0.05,
    }
else:
    # visibility_timeout only matters on Redis: an unacked (acks_late) task is redelivered after it.
    # The database is the source of truth anyway (stale `queued` rows are re-published by the sweep).
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600)}
    if CELERY_BROKER_URL.startswith(("redis", "rediss")):
        import socket as _socket

        # A dead Redis (a cut link) is noticed within seconds: keepalive probes on idle sockets (a worker
        # blocked in BRPOP sends nothing), a read timeout above BRPOP's own 1-s wait, and a health check
        # before a connection idle for a while is reused. The worker's consumer reads through its event
        # loop, where the read timeout does not apply, and a BRPOP sent into the cut is never acknowledged,
        # where keepalives do not apply either (TCP retransmits it for 15 minutes): TCP_USER_TIMEOUT gives
        # up on unacknowledged data after 15 s, as for PostgreSQL.
        _keepalive = {_socket.TCP_KEEPIDLE: 5, _socket.TCP_KEEPINTVL: 2, _socket.TCP_KEEPCNT: 3}
        if hasattr(_socket, "TCP_USER_TIMEOUT"):  # Linux
            # Milliseconds unacknowledged data may wait before the connection to Redis is given up.
            _keepalive[_socket.TCP_USER_TIMEOUT] = env_int(
                "SMSGW_BROKER_TCP_USER_TIMEOUT_MS", 15000, minimum=1000
            )
        CELERY_BROKER_TRANSPORT_OPTIONS.update(
            socket_connect_timeout=5,
            # Seconds a read from Redis may wait (above BRPOP's own 1-s wait).
            socket_timeout=env_float("SMSGW_BROKER_SOCKET_TIMEOUT", 10.0, minimum=2.0),
            socket_keepalive=True,
            socket_keepalive_options=_keepalive,
            health_check_interval=10,
        )
BROKER_IS_AMQP = CELERY_BROKER_URL.startswith(("amqp", "pyamqp", "amqps"))
if BROKER_IS_AMQP:
    # RabbitMQ: every task queue is a durable quorum queue (replicated; deploy/rabbitmq/definitions.json
    # declares them, with a policy for the delivery limit and the dead-letter exchange), and every
    # publish waits for the broker's confirm, so a task the sweep counted as published is on disk in the
    # queue (kombu's py-amqp transport: confirm_publish). Quorum queues take no countdown/ETA tasks and no
    # global QoS; nothing here uses either (Celery detects the quorum queues and uses per-consumer QoS).
    CELERY_TASK_DEFAULT_QUEUE_TYPE = env_choice("SMSGW_AMQP_QUEUE_TYPE", "quorum", ("quorum", "classic"))
    CELERY_TASK_CREATE_MISSING_QUEUE_TYPE = CELERY_TASK_DEFAULT_QUEUE_TYPE
    CELERY_BROKER_TRANSPORT_OPTIONS["confirm_publish"] = True
# AMQP: heartbeats every 10 s (RabbitMQ closes a silent connection after two missed ones, and the
# worker notices a dead broker as fast); connecting gives up after 5 s and retries.
CELERY_BROKER_HEARTBEAT = env_int("SMSGW_BROKER_HEARTBEAT", 10, minimum=0)
CELERY_BROKER_CONNECTION_TIMEOUT = 5.0
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A send task returns once its submissions are handed to the event loop, and every task here is
# idempotent on the rows' state: a task still running when the broker connection drops finishes, and its
# redelivery (if any) finds nothing left to do. Cancelling it would kill submissions on the wire.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# Bound each pool child's memory: past this resident size (KiB) a child is replaced after its current
# task (in-flight submissions drain first, delivery.tasks); growth never accumulates across hours. Set
# above what a warm send child holds with a full batch in flight (about 150 MB at 250 submissions in
# flight, 105-111 MB at 200/s): at 140,000 KB every send child crossed it during each task of a burst and
# was replaced after it, which cost a quarter of the send workers' CPU (docs/benchmarks-history.md,
# 2026-12-03).
CELERY_WORKER_MAX_MEMORY_PER_CHILD = env_int("SMSGW_WORKER_MAX_MEMORY_KB", 200_000, minimum=10_000)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A warm shutdown (SIGTERM) still waiting for running tasks after this long becomes a cold one
# (config.celery): every process stops within 30 s of SIGTERM, whatever its tasks wait on.
WORKER_STOP_SECONDS = env_float("SMSGW_WORKER_STOP_SECONDS", 22.0, minimum=1.0)
# Task events (received, started, succeeded, failed) for Flower and `celery events`: on in production.
# Published to the broker's event exchange; with no monitor listening, Redis drops them.
CELERY_WORKER_SEND_TASK_EVENTS = env_bool("SMSGW_CELERY_EVENTS", PRODUCTION)
CELERY_TASK_SEND_SENT_EVENT = CELERY_WORKER_SEND_TASK_EVENTS
CELERY_TASK_DEFAULT_QUEUE = "default"
# Celery's consumer with its bad-message handling kept and its log lines free of message contents.
CELERY_WORKER_CONSUMER = "smsgw.runtime.worker_consumer:Consumer"
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = "UTC"
