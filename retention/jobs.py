"""The retention job (docs/retention.md): one run, every SMSGW_RETENTION_INTERVAL_SECONDS on the
``retention`` queue, does each pass in bounded batches until it has nothing left or its budget is spent.

Each batch is its own transaction and takes row locks only on what it moves or changes (SKIP LOCKED on
the messages it moves), so the sweep, the claim and the receipt processor never wait on it, and a run
killed at any point loses at most the batch it was in, which the next run does again.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import Counter
from collections.abc import Callable

from django.conf import settings
from django.utils import timezone

from retention.definitions import definitions_content_remove, definitions_prune
from retention.exports import exports_run
from retention.history import history_move_batch
from retention.horizon import history_content_due, messages_content_due
from retention.inbound import inbound_content_due, inbound_prune
from retention.models import RetentionAction, RetentionAudit
from retention.prune import history_prune, strays_prune

log = logging.getLogger(__name__)

Pass = Callable[..., dict[str, int]]

# In order: what leaves the hot tables first, then what is past its horizons.
PASSES: tuple[tuple[str, Pass], ...] = (
    (RetentionAction.HISTORY_MOVE, history_move_batch),
    (RetentionAction.CONTENT_HORIZON, messages_content_due),
    (RetentionAction.CONTENT_HORIZON, history_content_due),
    (RetentionAction.CONTENT_HORIZON, definitions_content_remove),
    (RetentionAction.CONTENT_HORIZON, inbound_content_due),
    (RetentionAction.RECORD_HORIZON, history_prune),
    (RetentionAction.RECORD_HORIZON, strays_prune),
    (RetentionAction.RECORD_HORIZON, definitions_prune),
    (RetentionAction.RECORD_HORIZON, inbound_prune),
)

ACTOR = "retention job"


def retention_run(
    *, now: dt.datetime | None = None, budget_seconds: float = 120.0
) -> dict[str, dict[str, int]]:
    """Run every pass until done or out of budget; one audit row per action with what it removed."""
    now = now or timezone.now()
    deadline = time.monotonic() + budget_seconds
    totals: dict[str, Counter[str]] = {}
    for action, run_pass in PASSES:
        for _ in range(settings.RETENTION_RUN_BATCHES):
            done = run_pass(now=now)
            if not done:
                break
            totals.setdefault(action, Counter()).update(done)
            if time.monotonic() > deadline:
                break
        if time.monotonic() > deadline:
            log.info("retention run stopped at its budget; the next run goes on")
            break
    # The daily exports, after the moves (a day may straddle them; each message is read once either way):
    # bounded by its own budget of tenant-days, it audits its own pruning (retention.exports).
    exported = exports_run(now=now) if time.monotonic() < deadline else {}
    for action, counts in totals.items():
        RetentionAudit.objects.create(
            action=action, actor=ACTOR, counts=dict(counts), created_at=timezone.now()
        )
        log.info("retention %s", action, extra={"counts": dict(counts)})
    result = {action: dict(counts) for action, counts in totals.items()}
    if exported.get("written") or exported.get("pruned") or exported.get("failed"):
        result["exports"] = exported
    return result
