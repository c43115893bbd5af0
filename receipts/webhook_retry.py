"""When a failed tenant webhook delivery is tried again (docs/webhooks.md, "Retries").

The schedule is a deadline, not a count: a delivery is retried until ``SMSGW_WEBHOOK_RETRY_WINDOW_SECONDS``
(three days) after its first attempt, then dead-lettered; the tenant can list it and replay it
(``GET /v1/webhook-deliveries?status=dead``, ``POST /v1/webhook-deliveries/{id}/replay``).

Each wait is as long as the time already spent since the first attempt, at least the base and at most the
max delay, shortened at random by up to half (so receivers that failed together do not get their retries
together): the attempts' distances from the first grow by a factor of 1.5 to 2 each time, which is
exponential backoff without a counter to keep. The last attempt is placed at the deadline itself, so the
window is used to its end whatever the jitter drew.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from django.conf import settings


def retry_at(
    *,
    since: datetime,
    failed_at: datetime,
    window: float,
    base: float,
    max_delay: float,
    jitter: float = 1.0,
) -> datetime | None:
    """The time of the next attempt after one that failed at ``failed_at``, the window having started at
    ``since``; None once the window is over (the delivery is dead). ``jitter`` (0.5 to 1) scales the wait."""
    deadline = since + timedelta(seconds=window)
    if failed_at >= deadline:
        return None
    elapsed = (failed_at - since).total_seconds()
    wait = min(max_delay, max(base, elapsed)) * jitter
    return min(failed_at + timedelta(seconds=wait), deadline)


def next_attempt(*, since: datetime, failed_at: datetime) -> datetime | None:
    """``retry_at`` with the settings and a random jitter."""
    return retry_at(
        since=since,
        failed_at=failed_at,
        window=settings.WEBHOOK_RETRY_WINDOW_SECONDS,
        base=settings.WEBHOOK_RETRY_BASE_SECONDS,
        max_delay=settings.WEBHOOK_RETRY_MAX_DELAY_SECONDS,
        jitter=random.uniform(0.5, 1.0),
    )


def retry_offsets(*, window: float, base: float, max_delay: float, jitter: float = 1.0) -> list[float]:
    """Every attempt's distance in seconds from the first (0.0 first) when each fails at once: the schedule
    the docs show, and what the tests check."""
    if base <= 0:
        raise ValueError("base must be positive: with no wait the attempts would never get anywhere")
    since = datetime(2000, 1, 1)
    at: datetime | None = since
    offsets = []
    while at is not None:
        offsets.append((at - since).total_seconds())
        at = retry_at(since=since, failed_at=at, window=window, base=base, max_delay=max_delay, jitter=jitter)
    return offsets
