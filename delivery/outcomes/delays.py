"""Every delay the gateway waits before trying a message (or a receipt) again, in one module.

* ``retry_decide``: a charged transient failure; exponential backoff with full jitter, bounded by
  attempts and age, never sooner than the provider's Retry-After.
* ``throttle_delay``: the provider throttled the message (not charged); exponential in the throttles it
  met so far, never sooner than Retry-After.
* ``unavailable_delay``: the provider failed for its own reasons (5xx, timeout, connection error; not
  charged); the same backoff as a retry, in the message's uncharged calls.
* ``circuit_park_delay``, ``reconcile_first_look_delay``: fixed waits, from settings.
* ``receipt_retry_delay``: a receipt whose message is not known yet is tried again after this.

Which of these applies to which provider answer is decided by ``delivery.outcomes.table``, and
``delivery.outcomes.mover.wait_for`` applies it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

MAX_EXPONENT = 16


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    run_after: datetime | None
    reason: str


def uncharged_calls(row: Mapping[str, Any]) -> int:
    """This message's earlier provider calls that cost it no attempt (throttles, holds, outages)."""
    return int(row["provider_calls"]) - int(row["attempt_count"])


def retry_decide(
    *,
    attempt_number: int,
    now: datetime,
    first_due: datetime,
    expires_at: datetime,
    retry_after: float | None = None,
    rng: random.Random | None = None,
) -> RetryDecision:
    uniform = rng.uniform if rng is not None else random.uniform
    if attempt_number >= settings.RETRY_MAX_ATTEMPTS:
        return RetryDecision(False, None, f"gave up after {attempt_number} attempts")
    cap = min(settings.RETRY_MAX_DELAY_SECONDS, settings.RETRY_BASE_SECONDS * 2 ** (attempt_number - 1))
    # Full jitter spreads a provider outage's retries instead of returning them as one synchronized wave.
    delay = uniform(cap / 2, cap) if cap > 0 else 0.0
    if retry_after:
        delay = max(delay, retry_after)
    at = now + timedelta(seconds=delay)
    if at - first_due > timedelta(seconds=settings.RETRY_MAX_AGE_SECONDS):
        return RetryDecision(False, None, "retry window exhausted (max age)")
    if at >= expires_at:
        return RetryDecision(False, None, "validity would pass before the next attempt")
    return RetryDecision(True, at, f"retry {attempt_number + 1} in {delay:.1f}s")


def throttle_delay(*, uncharged_calls: int, retry_after: float | None = None) -> float:
    """Backoff after the provider throttled a message: exponential in the throttles it met so far, with
    jitter, never sooner than the provider's Retry-After (Twilio sends none with 20429)."""
    exponent = min(max(uncharged_calls, 0), MAX_EXPONENT)
    cap = min(settings.THROTTLE_MAX_DELAY_SECONDS, settings.THROTTLE_BASE_SECONDS * 2**exponent)
    delay = random.uniform(cap / 2, cap) if cap > 0 else 0.0
    return max(delay, retry_after or 0.0)


def unavailable_delay(*, uncharged_calls: int, retry_after: float | None = None) -> float:
    """Backoff after the provider failed for its own reasons: exponential (from SMSGW_RETRY_BASE_SECONDS,
    capped by SMSGW_RETRY_MAX_DELAY_SECONDS) in this message's earlier uncharged calls, full jitter, never
    sooner than a Retry-After."""
    exponent = min(max(0, uncharged_calls), MAX_EXPONENT)
    cap = min(settings.RETRY_MAX_DELAY_SECONDS, settings.RETRY_BASE_SECONDS * 2**exponent)
    delay = random.uniform(cap / 2, cap) if cap > 0 else 0.0
    return max(delay, retry_after or 0.0)


def circuit_park_delay() -> float:
    """While the account's circuit is open, a message waits this long before it is looked at again."""
    return settings.CIRCUIT_PARK_SECONDS


def reconcile_first_look_delay() -> float:
    """An uncertain submission is looked up at the provider no sooner than this."""
    return settings.RECONCILE_FIRST_LOOK_SECONDS


def receipt_retry_delay(tries: int) -> timedelta:
    """A receipt that overtook its submit record is tried again after this (receipts.processor)."""
    return timedelta(seconds=min(60.0, 0.5 * 2 ** min(tries, 10)))
