"""Metrics and readiness (smsgw.observability, smsgw.http.health)."""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from config.settings.environment import PRODUCTION, VAR_DIR
from smsgw.config import security
from smsgw.config.env import env_float, env_int, env_secret

# --- metrics (smsgw.observability) ------------------------------------------------------------------
# Event counters of every process on this host are memory-mapped files here (prometheus-client
# multiprocess mode). Set before anything imports prometheus_client, and inherited by the processes
# this one starts. The directory is per host; empty it only when every smsgw process of the host stops.
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(VAR_DIR / "metrics"))
Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)
# GET /metrics answers only with "Authorization: Bearer <token>"; without a token it is 404.
METRICS_TOKEN = env_secret("SMSGW_METRICS_TOKEN", "")
security.placeholders_refuse(PRODUCTION, SMSGW_METRICS_TOKEN=METRICS_TOKEN)
# /readyz: a sweep pass older than this is reported stale (and /readyz?sweep=1 answers 503).
SWEEP_STALE_SECONDS = env_int("SMSGW_SWEEP_STALE_SECONDS", 60, minimum=5)
# Queue consumers (smsgw.observability.queues): each worker's main process records the queues it consumes
# this often; a consumer not heard from for the stale time (three beats by default: one late beat on a
# loaded host is not a death) is gone. /readyz and /metrics report a queue with messages ready and no
# consumer; past SMSGW_QUEUE_UNCONSUMED_SECONDS /readyz lists it (and /readyz?queues=1 answers 503).
QUEUE_CONSUMER_HEARTBEAT_SECONDS = env_float("SMSGW_QUEUE_CONSUMER_HEARTBEAT_SECONDS", 10.0, minimum=0.5)
# A consumer not heard from for this long is gone (default three heartbeats).
QUEUE_CONSUMER_STALE_SECONDS = env_float(
    "SMSGW_QUEUE_CONSUMER_STALE_SECONDS", 3 * QUEUE_CONSUMER_HEARTBEAT_SECONDS, minimum=1.0
)
if QUEUE_CONSUMER_STALE_SECONDS <= QUEUE_CONSUMER_HEARTBEAT_SECONDS:
    raise ImproperlyConfigured(
        "SMSGW_QUEUE_CONSUMER_STALE_SECONDS must be longer than SMSGW_QUEUE_CONSUMER_HEARTBEAT_SECONDS"
    )
# How long a queue may have messages ready and no live consumer before /readyz names it (see above).
QUEUE_UNCONSUMED_SECONDS = env_int("SMSGW_QUEUE_UNCONSUMED_SECONDS", 60, minimum=1)
# /readyz asks the broker (a connection, the queue depths) at most once per this many seconds per process,
# however many probes arrive: it needs no credentials and must not open a broker connection per request.
READYZ_BROKER_SECONDS = env_float("SMSGW_READYZ_BROKER_SECONDS", 5.0, minimum=0.0)
