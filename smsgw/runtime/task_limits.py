"""Time limits for every Celery task, and the clean stop at the soft one.

Every task of the app has a soft and a hard limit (settings.CELERY_TASK_ANNOTATIONS, one line per
task, sized to its work): a task stuck on a tenant's endpoint, a provider or a pathological input is
interrupted instead of holding its worker slot for ever. At the soft limit Celery raises
SoftTimeLimitExceeded in the task; at the hard one it kills the pool process.

A periodic pass (sweep, materializer, receipts, webhooks, probes) stops cleanly at the soft limit: its
open transaction rolls back, and whatever it had not reached is found again by the next tick, so the
exception is logged and swallowed rather than reported as a failure.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from celery.exceptions import SoftTimeLimitExceeded

log = logging.getLogger(__name__)


def next_tick_goes_on[**P](run: Callable[P, None]) -> Callable[P, None]:
    """For a periodic pass whose unfinished work the next tick finds again: the soft limit ends it
    quietly (a warning), not as a task failure."""

    @functools.wraps(run)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            run(*args, **kwargs)
        except SoftTimeLimitExceeded:
            log.warning("task %s stopped at its soft time limit; the next tick goes on", run.__name__)

    return wrapper
