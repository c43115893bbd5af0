"""The pipeline's pace and windows: the sweep, retries, validity, schedules and campaigns."""

from __future__ import annotations

from smsgw.config.env import env_float, env_int

# --- pipeline tuning ------------------------------------------------------------------------------
# Whole seconds: django-celery-beat stores intervals as integers (0.5 would become 0 and fire
# continuously). Inside each interval the sweep itself polls every 50 ms, so due work waits far less.
SWEEP_INTERVAL_SECONDS = env_int("SMSGW_SWEEP_INTERVAL", 1, minimum=1)
# That poll: the pause of the sweep's and the receipt processor's loops after a pass that did not fill a
# batch (sweep_for, receipts_process_for), so the longest a due message or a received callback waits for
# its next pass. Each pass costs a few statements whether it finds work or not: the integration tests,
# which run dozens of pipelines side by side on two cores, raise it to 0.1 s (tests/integration/conftest.py).
IDLE_POLL_SECONDS = env_float("SMSGW_IDLE_POLL_SECONDS", 0.05, minimum=0.01)
# Due rows the sweep claims per statement.
SWEEP_BATCH_SIZE = env_int("SMSGW_SWEEP_BATCH_SIZE", 1000, minimum=1)
# Message ids per send task.
SEND_BATCH_SIZE = env_int("SMSGW_SEND_BATCH_SIZE", 250, minimum=1)
# SEND_CONCURRENCY (provider requests in flight per send process) is set with the provider settings below.

# A message still `queued` this long after it was published is looked at again (re-published only if its
# send queue is empty: SMSGW_TASK_LOST_AFTER_SECONDS).
QUEUED_RECOVERY_SECONDS = env_int("SMSGW_QUEUED_RECOVERY_SECONDS", 120, minimum=1)
# A stale `queued` row whose send queue still has a backlog is not re-published (its task is most likely
# still waiting) until it has waited this long; one in an empty queue is re-published after
# TASK_LOST_AFTER (scheduling.dispatch.recovery).
REPUBLISH_MAX_WAIT_SECONDS = env_int("SMSGW_REPUBLISH_MAX_WAIT_SECONDS", 600, minimum=1)
# A `queued` message whose send queue has been empty this long is re-published (its task was lost).
TASK_LOST_AFTER_SECONDS = env_int("SMSGW_TASK_LOST_AFTER_SECONDS", 10, minimum=1)
# A disabled tenant's due messages wait (`tenant_disabled`) and are looked at again this often.
DISABLED_TENANT_RECHECK_SECONDS = env_int("SMSGW_DISABLED_TENANT_RECHECK_SECONDS", 30, minimum=1)
# A message still `sending` this long after its claim is reconciled (its worker is presumed gone); every
# provider's request timeout must be shorter.
SENDING_LEASE_SECONDS = env_int("SMSGW_SENDING_LEASE_SECONDS", 120, minimum=1)
# Provider attempts (transient answers) before a message fails.
RETRY_MAX_ATTEMPTS = env_int("SMSGW_RETRY_MAX_ATTEMPTS", 6, minimum=1)
# On a route with another leg after this one, a message moves on after this many transient answers on its
# leg (the provider said it did not process the request) instead of using all SMSGW_RETRY_MAX_ATTEMPTS
# there (delivery.routing.failover).
FAILOVER_RETRY_ATTEMPTS = env_int("SMSGW_FAILOVER_RETRY_ATTEMPTS", 2, minimum=1)
# The first retry's backoff after a transient answer; it doubles each attempt, with full jitter ...
RETRY_BASE_SECONDS = env_float("SMSGW_RETRY_BASE_SECONDS", 2.0, minimum=0.0)
# The retry backoff's cap.
RETRY_MAX_DELAY_SECONDS = env_float("SMSGW_RETRY_MAX_DELAY_SECONDS", 300.0, minimum=0.0)
# No retry later than this after the message became due.
RETRY_MAX_AGE_SECONDS = env_int("SMSGW_RETRY_MAX_AGE_SECONDS", 6 * 3600, minimum=1)
# A `send_at` up to this far in the past is sent now; further back it is refused.
SEND_AT_PAST_TOLERANCE_SECONDS = env_int("SMSGW_SEND_AT_PAST_TOLERANCE", 300, minimum=0)
# How far ahead a `send_at` may be.
MAX_SCHEDULE_AHEAD_DAYS = env_int("SMSGW_MAX_SCHEDULE_AHEAD_DAYS", 400, minimum=1)
# The Twilio-compatible API's strict mode (scheduling.facade): the least lead time of a SendAt, as Twilio's
# scheduling article and error 35114 state it (900 s; Twilio's newer error pages say 300 s).
FACADE_STRICT_MIN_LEAD_SECONDS = env_int("SMSGW_FACADE_STRICT_MIN_LEAD_SECONDS", 900, minimum=0)
# A message not sent within this long after it became due expires (unless it asks for its own validity).
DEFAULT_VALIDITY_SECONDS = env_int("SMSGW_DEFAULT_VALIDITY_SECONDS", 48 * 3600, minimum=60)
# The longest body accepted, in segments.
MAX_SEGMENTS = env_int("SMSGW_MAX_SEGMENTS", 10, minimum=1)
# POST /v1/messages/batch: the most messages one request may carry (the body cap still applies).
BATCH_MAX_MESSAGES = env_int("SMSGW_BATCH_MAX_MESSAGES", 1000, minimum=1)
# Recurring schedules (scheduling.schedules.materialize): occurrences are made as messages this far ahead.
SCHEDULE_HORIZON_SECONDS = env_int("SMSGW_SCHEDULE_HORIZON_SECONDS", 24 * 3600, minimum=60)
# Whole seconds: django-celery-beat stores an interval as an integer, and 0 would fire continuously.
MATERIALIZE_INTERVAL_SECONDS = env_int("SMSGW_MATERIALIZE_INTERVAL", 10, minimum=1)
# Schedules claimed per statement; one batch is one transaction.
MATERIALIZE_BATCH_SIZE = env_int("SMSGW_MATERIALIZE_BATCH_SIZE", 500, minimum=1)
# Abuse guard: a rule that fires more often than this on one local day is rejected (field `rrule`).
SCHEDULE_MAX_PER_DAY = env_int("SMSGW_SCHEDULE_MAX_PER_DAY", 24, minimum=1)


# Recipients per creation-job transaction (scheduling.campaigns.make): large enough that per-statement and
# per-commit costs vanish against the rows, small enough that a killed worker redoes well under a second of
# work and a cancel waits at most that long for the batch in flight.
CAMPAIGN_BATCH_SIZE = env_int("SMSGW_CAMPAIGN_BATCH_SIZE", 5000, minimum=1)
# A recipient list is made in at most this many line ranges, each a job of its own on the `campaigns` queue,
# so a large list is made by that many worker processes at once (one process is one core: its build
# thread and its inserts share one GIL). Set it to the campaigns workers' total concurrency, or above: a
# range waits in the queue for a free process. A range holds at least CAMPAIGN_RANGE_MIN_ROWS records,
# so a small list stays one job.
CAMPAIGN_MAKE_RANGES = env_int("SMSGW_CAMPAIGN_MAKE_RANGES", 4, minimum=1)
# The fewest recipients in one range of a campaign's creation job (see above).
CAMPAIGN_RANGE_MIN_ROWS = env_int("SMSGW_CAMPAIGN_RANGE_MIN_ROWS", 50_000, minimum=1)

# How often campaigns are looked at for completion (scheduling.campaigns.control.campaigns_tick).
CAMPAIGN_TICK_SECONDS = env_float("SMSGW_CAMPAIGN_TICK_SECONDS", 5.0, minimum=0.5)
# A running operator job (the admin's bulk cancel, reschedule or replay over a filter) that committed no
# chunk for this many seconds lost its task with its worker: the campaigns tick publishes it again, and it
# goes on after its last committed chunk (scheduling.operator_jobs.runner).
OPERATOR_JOB_STALE_SECONDS = env_float("SMSGW_OPERATOR_JOB_STALE_SECONDS", 120.0, minimum=1.0)
# Messages an operator job applies per chunk (one transaction; the cursor moves with it).
OPERATOR_JOB_CHUNK_SIZE = env_int("SMSGW_OPERATOR_JOB_CHUNK_SIZE", 500, minimum=1)
