"""The Celery queues smsgw publishes to: their names here, and the list of them (``ROUTED_QUEUES``) derived
from the composition root's jobs table (config.settings.jobs), where each task names its queue.

Every process that must run for the gateway to work is a worker on some of these queues, so the list is
what the deploy examples are held to: tests/smsgw/runtime/test_queues.py fails when a task route, a beat
entry or a literal ``queue=`` in a publish names a queue that is not here, and when docs/deploy.md's
production block, deploy/Procfile or the systemd instance examples start no worker for one of them (a
queue with no worker is silent: its tasks wait for ever, e.g. every campaign stays ``creating``).
Readiness and /metrics report each of them (smsgw.observability.queues). The names import nothing: the
settings read them.
"""

from __future__ import annotations

SWEEP = "sweep"  # the sweep and the schedule materializer (beat ticks)
SEND_PREFIX = "send."  # one send queue per priority class (scheduling.dispatch.recovery.send_queue)
SEND_TRANSACTIONAL = SEND_PREFIX + "transactional"
SEND_BULK = SEND_PREFIX + "bulk"
RECONCILE = "reconcile"  # provider look-ups, holds and circuit probes, campaign control, housekeeping
RECEIPTS = "receipts"
INBOUND = "inbound"  # replies from recipients: keywords, actions, the tenant's message.received
WEBHOOKS = "webhooks"
CAMPAIGNS = "campaigns"  # campaign creation jobs (making a campaign's messages)
RETENTION = "retention"  # history moves, redaction and pruning at the horizons, daily exports


def __getattr__(name: str) -> tuple[str, ...]:
    # ``ROUTED_QUEUES``: every queue, in order, derived from the jobs table (config.settings.jobs:
    # SMSGW_QUEUES), read when first asked for, once the settings are configured.
    if name == "ROUTED_QUEUES":
        from django.conf import settings

        return tuple(settings.SMSGW_QUEUES)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
