"""Every task that runs on a worker, in one table: its queue, how often beat starts it (periodic jobs),
whether it is a tick, and its time limit. The task routes, the beat schedule, the tick list, the queue
list and the time limits are all derived from it, so adding a job is one row here (and the task itself).

- ``queues``: where it is published. One queue: its task route. Several: the code picks one per
  publish (a send batch goes to its priority's queue, scheduling.dispatch.recovery.send_queue).
- ``every``: seconds between beat's starts; ``None`` for a job the code publishes. Whole seconds for
  the sub-minute ticks: django-celery-beat stores an interval as an integer (0.5 would become 0 and
  fire continuously).
- ``tick``: a frequent periodic pass whose "received", "succeeded" and "Sending due task" lines are
  dropped at INFO (smsgw.runtime.logs.QuietTicks; SMSGW_LOG_TICKS=1 keeps them).
- ``soft_limit``: its soft time limit, sized to the task's own work with room for a slow database, never
  "unlimited" (smsgw.runtime.task_limits): SoftTimeLimitExceeded in the task (a periodic pass stops
  cleanly and the next tick goes on), and a hard limit 30 s later (the pool process is killed; acks_late
  puts the message back).
- ``entry``: the beat entry's name, which django-celery-beat's DatabaseScheduler installs in its tables
  at start-up (operators see and pause it in the admin).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from config.settings.pipeline import (
    CAMPAIGN_TICK_SECONDS,
    MATERIALIZE_INTERVAL_SECONDS,
    SWEEP_INTERVAL_SECONDS,
)
from config.settings.providers import (
    HOLDS_PROBE_INTERVAL_SECONDS,
    PROVIDER_REQUEST_TIMEOUT_SECONDS,
    RECONCILE_TASK_SECONDS,
)
from config.settings.receipts import (
    STATUS_LOOKUP_BUDGET_SECONDS,
    STATUS_LOOKUP_INTERVAL_SECONDS,
    STATUS_LOOKUP_TIMEOUT_SECONDS,
    WEBHOOK_TIMEOUT_SECONDS,
)
from config.settings.retention import RETENTION_INTERVAL_SECONDS
from smsgw.config.env import env_float
from smsgw.runtime import queues as q


@dataclass(frozen=True)
class Job:
    task: str
    queues: tuple[str, ...]
    soft_limit: float
    every: float | None = None
    tick: bool = False
    entry: str = ""


_WEBHOOK_ROUNDS = math.ceil(200 / 16)  # receipts.webhooks: 200 deliveries a pass on 16 threads

JOBS: tuple[Job, ...] = (
    # The sweep: due messages to the send queues (scheduling.dispatch). Inside each interval it polls
    # every 50 ms, so due work waits far less than the interval.
    Job(
        "scheduling.sweep",
        (q.SWEEP,),
        SWEEP_INTERVAL_SECONDS * 0.9 + 60,
        SWEEP_INTERVAL_SECONDS,
        True,
        "smsgw-sweep",
    ),
    # Rolls every active schedule's horizon forward; shares the sweep's queue and workers (both are
    # short, database-bound passes). Idempotent (unique occurrence keys) and safe to overlap (SKIP
    # LOCKED), so a late duplicate only finds nothing to do.
    Job(
        "scheduling.materialize",
        (q.SWEEP,),
        MATERIALIZE_INTERVAL_SECONDS * 0.9 + 60,
        MATERIALIZE_INTERVAL_SECONDS,
        True,
        "smsgw-materialize",
    ),
    # Returns once the batch's submissions have started (answers are recorded as they come).
    Job("delivery.send_batch", (q.SEND_TRANSACTIONAL, q.SEND_BULK), PROVIDER_REQUEST_TIMEOUT_SECONDS + 60),
    Job(
        "delivery.reconcile_batch",
        (q.RECONCILE,),
        RECONCILE_TASK_SECONDS + PROVIDER_REQUEST_TIMEOUT_SECONDS + 60,
    ),
    # Probes provider accounts held after an account fault (delivery.flow.provider_holds); idle: one
    # indexed query.
    Job(
        "delivery.holds_probe",
        (q.RECONCILE,),
        PROVIDER_REQUEST_TIMEOUT_SECONDS + 30,
        HOLDS_PROBE_INTERVAL_SECONDS,
        True,
        "smsgw-holds-probe",
    ),
    # An open provider circuit with no message waiting is probed by fetching the account (a waiting
    # message is the probe otherwise, sent by the sweep). Idle: one indexed read.
    Job(
        "delivery.circuit_probe",
        (q.RECONCILE,),
        PROVIDER_REQUEST_TIMEOUT_SECONDS + 30,
        HOLDS_PROBE_INTERVAL_SECONDS,
        True,
        "smsgw-circuit-probe",
    ),
    # Receipts and webhooks have their own queues and workers: a burst of callbacks never delays sends.
    Job(
        "receipts.process",
        (q.RECEIPTS,),
        SWEEP_INTERVAL_SECONDS * 0.9 + 60,
        SWEEP_INTERVAL_SECONDS,
        True,
        "smsgw-receipts",
    ),
    # Inbound messages (replies) have their own queue and worker: a burst of replies never delays
    # receipts or sends, and the other way round. It polls inside its interval, as the receipts do.
    Job(
        "inbound.process",
        (q.INBOUND,),
        SWEEP_INTERVAL_SECONDS * 0.9 + 60,
        SWEEP_INTERVAL_SECONDS,
        True,
        "smsgw-inbound",
    ),
    # Messages stuck at `sent` (a lost final receipt) are looked up at the provider; idle: one query.
    Job(
        "receipts.status_lookup",
        (q.RECONCILE,),
        STATUS_LOOKUP_BUDGET_SECONDS + STATUS_LOOKUP_TIMEOUT_SECONDS + 60,
        STATUS_LOOKUP_INTERVAL_SECONDS,
        True,
        "smsgw-status-lookup",
    ),
    # A pass may wait for a full batch of deliveries that each run to their deadline.
    Job(
        "receipts.deliver_webhooks",
        (q.WEBHOOKS,),
        SWEEP_INTERVAL_SECONDS * 0.9 + WEBHOOK_TIMEOUT_SECONDS * (_WEBHOOK_ROUNDS + 1) + 30,
        SWEEP_INTERVAL_SECONDS,
        True,
        "smsgw-webhooks",
    ),
    # Old quota windows and idle API rate buckets (the tenant limits' housekeeping): two deletes over
    # small tables (a row per tenant per day, a row per key). Hourly, so its lines stay in the log.
    Job("limits.prune", (q.RECONCILE,), 300, 3600.0, False, "smsgw-limits-prune"),
    # A campaign's creation job runs for as long as its list takes (about a minute per million rows): its
    # own queue and workers, so it never holds up the sweep's ticks or the sends. A stopped job resumes
    # from its checkpoint.
    Job(
        "scheduling.campaign_make",
        (q.CAMPAIGNS,),
        # The creation job's time limit, seconds (about a minute per million recipients).
        env_float("SMSGW_CAMPAIGN_MAKE_TIME_LIMIT", 1800.0, minimum=60),
    ),
    # Campaign control jobs (bounded batch runs of TASK_BUDGET_SECONDS, 5 s, each): background database
    # work beside the reconciler.
    Job("scheduling.campaign_cancel", (q.RECONCILE,), 60),
    Job("scheduling.campaign_release", (q.RECONCILE,), 60),
    # An operator job (the admin's bulk actions over a filter): runs of 5 s of chunks, each publishing the
    # next; the limit leaves room for the chunk in flight on a slow database.
    Job("scheduling.operator_job", (q.RECONCILE,), 60),
    # Campaigns: completed when every message is final; a cancel or resume whose task was lost goes on.
    # Idle: one query on the campaign table and a counter read per active campaign.
    Job("scheduling.campaigns_tick", (q.RECONCILE,), 60, CAMPAIGN_TICK_SECONDS, True, "smsgw-campaigns"),
    # Retention (retention.jobs): finished messages to history, content and records past their horizons,
    # the daily exports. Its own queue and worker: a long first run after an upgrade (a year of messages
    # to move) never holds up the reconciler or the sweep. A run stops at its 120 s budget; the soft limit
    # leaves room for the batch in progress.
    Job("retention.run", (q.RETENTION,), 300, RETENTION_INTERVAL_SECONDS, False, "smsgw-retention"),
    # The operator console's minute figures (reporting.minutes): this minute's state and the closed
    # minutes' sends and failures, read over one minute's changed rows. Beside the reconciler: a few
    # bounded queries a minute.
    Job("reporting.console_minutes", (q.RECONCILE,), 60, 60.0, True, "smsgw-console-minutes"),
)


def _tick_expiry(interval: float) -> dict:
    """A tick that waited longer than two intervals is redundant: a newer one covers the same work, and
    piled-up ticks would be replayed in a rush when workers catch up. django-celery-beat's
    DatabaseScheduler drops an ``expires`` option when it installs an entry (ModelEntry._unpack_options
    keeps only ``expire_seconds``, an integer, which it then sends as ``expires``); ``expires`` is kept
    for any other scheduler. Workers discard an expired task unrun (Celery: "Discarding revoked task")."""
    seconds = max(2, math.ceil(interval * 2))
    return {"expires": float(seconds), "expire_seconds": seconds}


CELERY_TASK_ROUTES = {job.task: {"queue": job.queues[0]} for job in JOBS if len(job.queues) == 1}
CELERY_BEAT_SCHEDULE = {
    job.entry: {
        "task": job.task,
        "schedule": job.every,
        "options": {"queue": job.queues[0], **_tick_expiry(job.every)},
    }
    for job in JOBS
    if job.every is not None
}
CELERY_TASK_ANNOTATIONS = {
    job.task: {"soft_time_limit": float(job.soft_limit), "time_limit": float(job.soft_limit) + 30.0}
    for job in JOBS
}
# Any task not listed (Celery's own) gets these.
CELERY_TASK_SOFT_TIME_LIMIT = 600
CELERY_TASK_TIME_LIMIT = 630
# Read by smsgw.runtime.logs (the ticks' quiet lines) and smsgw.runtime.queues (every queue, in this
# order: readiness, /metrics, the deploy examples' workers).
SMSGW_TICK_TASKS = frozenset(job.task for job in JOBS if job.tick)
SMSGW_QUEUES = tuple(dict.fromkeys(queue for job in JOBS for queue in job.queues))
