"""Is every routed queue consumed? A queue with no worker is silent: its tasks wait in the broker for ever
and nothing fails (a deploy without a ``campaigns`` worker leaves every campaign ``creating``).

Why heartbeats in the database rather than asking the broker or Celery:

* Celery's ``inspect active_queues`` is a broadcast that waits for replies (a second or more, and a worker
  busy in a long task answers late or not at all): too slow and too noisy to run on every scrape and
  readiness probe of every web process.
* Only RabbitMQ counts consumers (queue.declare-ok's consumer_count). Redis and kombu's filesystem
  transport (the embedded run) have no such notion: a worker polling a list is invisible to them.

So each worker's main process records, every SMSGW_QUEUE_CONSUMER_HEARTBEAT_SECONDS, one row per queue it
consumes (smsgw.observability.consumers), and a scrape combines the rows with the broker's depth (one
passive declare per queue, smsgw.runtime.broker.queue_depths: the same on every transport). A queue is
**unconsumed** while it has ready messages and no consumer heard from within
SMSGW_QUEUE_CONSUMER_STALE_SECONDS.

For how long: brokers do not say how old the oldest waiting message is, so the first scrape or probe that
sees a queue unconsumed records the instant (UnconsumedQueue), and the first that sees it consumed or empty
deletes it: the figure lags the truth by at most one scrape interval (plus the stale time for a worker that
died without its goodbye). A consumer that came and went between two looks leaves its ``seen_at``, which
restarts the count from then. Writes happen only when the state changes, so a steady scrape is two small
reads and the declares on one channel; nothing is cached: one look costs about 8 ms on Redis and
PostgreSQL, 1 ms embedded (the 2-core development machine), so a probe every few seconds is cheap.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from smsgw.observability.models import QueueConsumer, UnconsumedQueue
from smsgw.runtime import broker
from smsgw.runtime.queues import ROUTED_QUEUES

# Rows of worker nodes not heard from for this long are deleted (a container's random hostname would
# otherwise leave one row per queue per start for ever). A day keeps the last consumer of a queue
# that lost it well past any alert's window.
CONSUMER_ROWS_KEPT = timedelta(days=1)


@dataclass(frozen=True)
class QueueState:
    name: str
    ready: int | None  # messages ready in the broker; None when the broker did not answer
    consumers: int  # worker nodes consuming it now
    unconsumed_seconds: float | None  # how long it has had ready messages and no consumer; None: unknown
    processes: int = 0  # the pool processes of those nodes (a node consuming several queues counts for each)
    busy: int = 0  # how many of them were running a task at their node's last beat


def queue_consumers_record(
    *,
    hostname: str,
    queues: Iterable[str],
    now: datetime | None = None,
    processes: int = 0,
    busy: int = 0,
) -> None:
    """Worker node ``hostname`` consumes ``queues`` now, with a pool of ``processes`` of which ``busy`` run a
    task; any other queue it consumed before, it stopped."""
    now = now or timezone.now()
    names = sorted(set(queues))
    busy = max(0, min(busy, processes))
    with transaction.atomic():
        if names:
            QueueConsumer.objects.bulk_create(
                [
                    QueueConsumer(
                        hostname=hostname, queue=q, seen_at=now, stopped=False, processes=processes, busy=busy
                    )
                    for q in names
                ],
                update_conflicts=True,
                unique_fields=["hostname", "queue"],
                update_fields=["seen_at", "stopped", "processes", "busy"],
            )
        QueueConsumer.objects.filter(hostname=hostname, stopped=False).exclude(queue__in=names).update(
            stopped=True, seen_at=now
        )


def queue_consumers_stop(*, hostname: str, now: datetime | None = None) -> None:
    """Worker node ``hostname`` consumes nothing any more (its goodbye): its rows need not go stale."""
    now = now or timezone.now()
    QueueConsumer.objects.filter(hostname=hostname, stopped=False).update(stopped=True, seen_at=now)


def queue_consumers_prune(*, now: datetime | None = None) -> int:
    cutoff = (now or timezone.now()) - CONSUMER_ROWS_KEPT
    return QueueConsumer.objects.filter(seen_at__lt=cutoff).delete()[0]


@dataclass
class _Live:
    consumers: Counter = field(default_factory=Counter)
    processes: Counter = field(default_factory=Counter)
    busy: Counter = field(default_factory=Counter)


def _consumers(names: list[str], now: datetime) -> tuple[_Live, dict[str, datetime]]:
    """Live consumers per queue (and their pools), and when each queue was last known consumed (live or
    not)."""
    fresh_after = now - timedelta(seconds=settings.QUEUE_CONSUMER_STALE_SECONDS)
    live = _Live()
    last_seen: dict[str, datetime] = {}
    rows = QueueConsumer.objects.filter(queue__in=names).values_list(
        "queue", "seen_at", "stopped", "processes", "busy"
    )
    for queue, seen_at, stopped, processes, busy in rows:
        if not stopped and seen_at >= fresh_after:
            live.consumers[queue] += 1
            live.processes[queue] += processes
            live.busy[queue] += busy
        if queue not in last_seen or seen_at > last_seen[queue]:
            last_seen[queue] = seen_at
    return live, last_seen


def queue_states_observe(
    *,
    names: Iterable[str] = ROUTED_QUEUES,
    now: datetime | None = None,
    depths: dict[str, int | None] | None = None,
) -> list[QueueState]:
    """Each queue's depth, live consumers and how long it has been unconsumed; records or clears the
    instant a queue was first seen unconsumed. The broker unreachable: depths unknown, nothing recorded.
    ``depths``: the broker's answer already at hand (/readyz keeps one for a few seconds), else asked."""
    names = list(names)
    now = now or timezone.now()
    if depths is None or set(depths) < set(names):
        depths = broker.queue_depths(names)
    live, last_seen = _consumers(names, now)
    marks = dict(UnconsumedQueue.objects.filter(queue__in=names).values_list("queue", "since"))
    states, start, clear = [], [], []
    for name in names:
        ready = depths[name]
        seconds: float | None = 0.0
        if ready is None:
            seconds = None
        elif ready == 0 or live.consumers[name]:
            if name in marks:
                clear.append(name)
        else:
            if name not in marks:
                start.append(name)
            since = max(marks.get(name, now), last_seen.get(name, now - CONSUMER_ROWS_KEPT))
            seconds = max(0.0, (now - since).total_seconds())
        states.append(
            QueueState(name, ready, live.consumers[name], seconds, live.processes[name], live.busy[name])
        )
    if start:
        # Several web processes may see it first at once: the first insert wins, the others keep it.
        UnconsumedQueue.objects.bulk_create(
            [UnconsumedQueue(queue=q, since=now) for q in start], ignore_conflicts=True
        )
    if clear:
        UnconsumedQueue.objects.filter(queue__in=clear).delete()
    return states
