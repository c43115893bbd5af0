"""Retry policy, in one place: exponential backoff with full jitter, bounded by attempts and age,
never sooner than the provider's Retry-After."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    run_after: datetime | None
    reason: str


def retry_decide(
    *,
    attempt_number: int,
    now: datetime,
    first_due: datetime,
    expires_at: datetime,
    retry_after: float | None = None,
    rng: random.Random | None = None,
) -> RetryDecision:
    rng = rng or random
    if attempt_number >= settings.RETRY_MAX_ATTEMPTS:
        return RetryDecision(False, None, f"gave up after {attempt_number} attempts")
    cap = min(settings.RETRY_MAX_DELAY_SECONDS, settings.RETRY_BASE_SECONDS * 2 ** (attempt_number - 1))
    # Full jitter spreads a provider outage's retries instead of returning them as one synchronized wave.
    delay = rng.uniform(cap / 2, cap) if cap > 0 else 0.0
    if retry_after:
        delay = max(delay, retry_after)
    at = now + timedelta(seconds=delay)
    if at - first_due > timedelta(seconds=settings.RETRY_MAX_AGE_SECONDS):
        return RetryDecision(False, None, "retry window exhausted (max age)")
    if at >= expires_at:
        return RetryDecision(False, None, "validity would pass before the next attempt")
    return RetryDecision(True, at, f"retry {attempt_number + 1} in {delay:.1f}s")
