"""The operator console's figures (reporting.console): what stands now, read live, and the last hour,
read from one ConsoleMinute row per minute that a periodic task (``reporting.console_minutes``) writes.

Cost is what shapes this module: the landing page must render in well under 300 ms with ten million
messages. So nothing here scans the message table's history:

* **Now** is /metrics' own state queries (reporting.state): a count bounded at EXACT_BELOW rows then the
  planner's estimate, one index probe for each oldest age, the small circuit and hold tables, and the
  queue look (smsgw.observability.queues).
* **What happened** in a minute (messages and segments sent per provider, the send lag, failures per
  provider and code) is read once, after the minute closed, over the rows that changed since it began:
  the ``sent`` partial index on sent_at (msg_sent_lookup) and the finished partial index on updated_at
  (msg_finished; a message sent in the minute and finished since was updated since). That is one
  minute's traffic, not the table. The page then reads 60 small rows.

The hour's lag percentiles come from each minute's histogram (buckets LAG_RATIO apart, so within 10 %);
a minute's own p50/p99 are exact.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Q
from django.utils import timezone

from delivery.guards.models import ReviewHold
from delivery.models import ProviderCircuit, ProviderHold, ProviderHostCircuit
from inbound.models import InboundState
from reporting.state import INBOUND, TERMINAL, WEBHOOK, _oldest, count
from scheduling.models import Message, Priority, Status
from smsgw.observability.models import ConsoleMinute
from smsgw.observability.queues import queue_states_observe

MINUTE = timedelta(minutes=1)
HOUR_MINUTES = 60
# A minute's flows are read once it closed this long ago: a send that stamped sent_at inside the minute
# has committed by then (the stamp is taken in the transaction that commits it, milliseconds before).
SETTLE_SECONDS = 5
# A pass fills at most this many closed minutes it missed (the task was down): each is read over the
# rows changed since the first, so a long gap would be a long read. Older gaps stay gaps on the charts.
CATCH_UP_MINUTES = 15
KEPT = timedelta(days=2)  # rows older than this are deleted by the pass
LAG_FLOOR = 0.01  # seconds: the histogram's first bucket holds every lag up to this
LAG_RATIO = 1.1  # each bucket's bound is 10 % above the previous one
FAILED = (Status.FAILED, Status.UNDELIVERED)


def minute_floor(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def _age(now: datetime, then: datetime | None) -> float:
    return max(0.0, (now - then).total_seconds()) if then else 0.0


# --- now ----------------------------------------------------------------------------------------------


def state_read(now: datetime) -> dict:
    """The figures as they stand at ``now``. Numbers only, except ``detail`` (names for the page: the
    open circuits' accounts, the queues without a consumer), which is not stored."""
    due, due_oldest = 0, 0.0
    where = '"status" = %s AND "priority" = %s AND "run_after" <= %s'  # msg_scheduled_due, per priority
    with connection.cursor() as cur:
        for priority in Priority.values:
            params = [Status.SCHEDULED, priority, now]
            due += count(cur, where, params)
            due_oldest = max(due_oldest, _age(now, _oldest(cur, "run_after", where, params)))
        pending = [InboundState.PENDING]
        inbound = count(cur, '"state" = %s', pending, table=INBOUND)
        inbound_due = '"state" = %s AND "next_try_at" <= %s'
        inbound_oldest = _age(now, _oldest(cur, "next_try_at", inbound_due, [*pending, now], table=INBOUND))
        outbox = count(cur, '"status" = %s', ["pending"], table=WEBHOOK)
        outbox_due = '"status" = %s AND "next_attempt_at" <= %s'
        outbox_oldest = _age(
            now, _oldest(cur, "next_attempt_at", outbox_due, ["pending", now], table=WEBHOOK)
        )
    circuits = sorted(ProviderCircuit.objects.filter(state="open").values_list("provider", "account"))
    host_circuits = ProviderHostCircuit.objects.filter(state="open").count()
    holds = Counter(ProviderHold.objects.filter(cleared_at__isnull=True).values_list("provider", flat=True))
    review_holds = ReviewHold.objects.filter(state="open").count()
    unconsumed = [
        (q.name, q.ready, q.unconsumed_seconds or 0.0)
        for q in queue_states_observe(now=now)
        if q.ready and not q.consumers
    ]
    return {
        "due": due,
        "due_oldest": due_oldest,
        "circuits_open": len(circuits),
        "host_circuits_open": host_circuits,
        "holds_open": sum(holds.values()),
        "review_holds_open": review_holds,
        "queues_unconsumed": len(unconsumed),
        "inbound_pending": inbound,
        "inbound_oldest": inbound_oldest,
        "webhook_outbox": outbox,
        "webhook_oldest": outbox_oldest,
        "detail": {"circuits": circuits, "holds": dict(sorted(holds.items())), "queues": unconsumed},
    }


# --- what happened in each minute ----------------------------------------------------------------------


def lag_bucket(seconds: float) -> int:
    if seconds <= LAG_FLOOR:
        return 0
    return math.ceil(math.log(seconds / LAG_FLOOR, LAG_RATIO) - 1e-9)


def lag_bucket_bound(bucket: int) -> float:
    return LAG_FLOOR * LAG_RATIO**bucket


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least ``q`` of the values at or below it."""
    if not sorted_values:
        return 0.0
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def _flows_rows(start: datetime, end: datetime):
    """(status, provider, segments, due_at, sent_at, failed_at, error_code) of every message sent or
    failed in [start, end): the sent ones through msg_sent_lookup, the finished ones through msg_finished
    (updated at or after ``start``, since they moved after it)."""
    columns = ("status", "provider", "segments", "due_at", "sent_at", "failed_at", "error_code")
    sent = Message.objects.filter(status=Status.SENT, sent_at__gte=start, sent_at__lt=end)
    finished = Message.objects.filter(status__in=TERMINAL, updated_at__gte=start).filter(
        Q(sent_at__gte=start, sent_at__lt=end) | Q(status__in=FAILED, failed_at__gte=start, failed_at__lt=end)
    )
    yield from sent.values_list(*columns).iterator(chunk_size=2000)
    yield from finished.values_list(*columns).iterator(chunk_size=2000)


def flows_read(start: datetime, end: datetime) -> dict[datetime, dict]:
    """Each minute of [start, end) (minute-aligned): what was sent and what failed in it."""
    sent: dict[datetime, Counter] = {}
    segments: dict[datetime, Counter] = {}
    failed: dict[datetime, Counter] = {}
    lags: dict[datetime, list[float]] = {}
    for status, provider, segs, due_at, sent_at, failed_at, error_code in _flows_rows(start, end):
        if sent_at is not None and start <= sent_at < end:
            m = minute_floor(sent_at)
            sent.setdefault(m, Counter())[provider] += 1
            segments.setdefault(m, Counter())[provider] += segs or 1
            lags.setdefault(m, []).append(max(0.0, (sent_at - due_at).total_seconds()))
        if status in FAILED and failed_at is not None and start <= failed_at < end:
            failed.setdefault(minute_floor(failed_at), Counter())[f"{provider}|{error_code or '-'}"] += 1
    minutes: dict[datetime, dict] = {}
    m = start
    while m < end:
        figures: dict = {
            "sent": dict(sent.get(m, {})),
            "segments": dict(segments.get(m, {})),
            "failed": dict(failed.get(m, {})),
        }
        values = sorted(lags.get(m, []))
        if values:
            figures["lag"] = {
                "p50": percentile(values, 0.5),
                "p99": percentile(values, 0.99),
                "max": values[-1],
                "hist": {str(b): n for b, n in sorted(Counter(map(lag_bucket, values)).items())},
            }
        minutes[m] = figures
        m += MINUTE
    return minutes


# --- the periodic pass ---------------------------------------------------------------------------------


def console_minutes_record(*, now: datetime | None = None) -> int:
    """Write this minute's state and the flows of the closed minutes not written yet (at most
    CATCH_UP_MINUTES back); delete rows older than KEPT. Returns how many minutes' flows it wrote.
    Idempotent: two passes in one minute rewrite the same row."""
    now = now or timezone.now()
    this = minute_floor(now)
    state = state_read(now)
    state.pop("detail")
    ConsoleMinute.objects.bulk_create(
        [ConsoleMinute(minute=this, state=state)],
        update_conflicts=True,
        unique_fields=["minute"],
        update_fields=["state"],
    )
    closed_end = minute_floor(now - timedelta(seconds=SETTLE_SECONDS))
    first = closed_end - CATCH_UP_MINUTES * MINUTE
    done = set(
        ConsoleMinute.objects.filter(
            minute__gte=first, minute__lt=closed_end, flows__isnull=False
        ).values_list("minute", flat=True)
    )
    missing = [first + i * MINUTE for i in range(CATCH_UP_MINUTES) if first + i * MINUTE not in done]
    written = 0
    if missing:
        flows = flows_read(missing[0], closed_end)
        ConsoleMinute.objects.bulk_create(
            [ConsoleMinute(minute=m, flows=flows[m]) for m in missing],
            update_conflicts=True,
            unique_fields=["minute"],
            update_fields=["flows"],
        )
        written = len(missing)
    ConsoleMinute.objects.filter(minute__lt=now - KEPT).delete()
    return written


# --- the hour, for the page ----------------------------------------------------------------------------


def hour_read(now: datetime) -> list[tuple[datetime, dict | None, dict | None]]:
    """The last HOUR_MINUTES minutes up to this one, oldest first: (minute, state, flows), None where
    nothing was written (the task was not running)."""
    this = minute_floor(now)
    first = this - (HOUR_MINUTES - 1) * MINUTE
    rows = {
        m: (state, flows)
        for m, state, flows in ConsoleMinute.objects.filter(minute__gte=first, minute__lte=this).values_list(
            "minute", "state", "flows"
        )
    }
    return [(m, *rows.get(m, (None, None))) for m in (first + i * MINUTE for i in range(HOUR_MINUTES))]


def lag_hour(flows: list[dict | None]) -> tuple[float, float, int]:
    """(p50, p99, messages) of the send lag over the minutes' histograms: a bucket's upper bound (at most
    LAG_RATIO above the true value), never above the largest lag seen."""
    buckets: Counter = Counter()
    top = 0.0
    for f in flows:
        lag = (f or {}).get("lag")
        if lag:
            buckets.update({int(b): n for b, n in lag["hist"].items()})
            top = max(top, lag["max"])
    total = sum(buckets.values())
    if not total:
        return 0.0, 0.0, 0
    result = []
    for q in (0.5, 0.99):
        rank, seen = max(1, math.ceil(q * total)), 0
        for bucket in sorted(buckets):
            seen += buckets[bucket]
            if seen >= rank:
                result.append(min(lag_bucket_bound(bucket), top))
                break
    return result[0], result[1], total
