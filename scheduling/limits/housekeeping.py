"""Pruning the limits tables, which otherwise only grow: one QuotaWindow row per tenant with a quota per
local day, one ApiRateBucket row per API key ever used without Redis.

* A quota window is only ever booked for a day a message is due in, never in the past (acceptance
  refuses a send_at more than SEND_AT_PAST_TOLERANCE_SECONDS ago), and only read for today's usage. A
  window whose day ended QUOTA_WINDOW_KEEP_DAYS ago is history; the messages keep their own record.
* A rate bucket whose theoretical arrival time (tat) has passed is a full bucket: deleting it changes
  nothing, because a missing row is a full bucket too. The condition is re-checked per row by the
  DELETE itself, so a request that refilled it meanwhile keeps its row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import date, timedelta

from django.utils import timezone

from scheduling.limits.models import ApiRateBucket, QuotaWindow

QUOTA_WINDOW_KEEP_DAYS = 35  # a month of daily usage stays visible to operators (admin, support)
BUCKET_IDLE_SECONDS = 300  # well past any burst window (SMSGW_API_RATE_BURST_SECONDS)


@dataclass(frozen=True)
class PruneReport:
    quota_windows: int
    rate_buckets: int


def limits_prune(*, today: date | None = None, now: float | None = None) -> PruneReport:
    # The oldest local "today" of any tenant is at most a day behind UTC's: one spare day covers it.
    today = today or timezone.now().date()
    cutoff = today - timedelta(days=QUOTA_WINDOW_KEEP_DAYS + 1)
    windows, _ = QuotaWindow.objects.filter(day__lt=cutoff).delete()
    idle = (now if now is not None else time.time()) - BUCKET_IDLE_SECONDS
    buckets, _ = ApiRateBucket.objects.filter(tat__lt=idle).delete()
    return PruneReport(quota_windows=windows, rate_buckets=buckets)
