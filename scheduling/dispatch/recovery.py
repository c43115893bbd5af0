"""Re-publishing only what the broker really lost.

A released message is ``queued`` with its send task in the broker and ``published_at`` set. Its row
stays ``queued`` until a worker claims it, which normally takes milliseconds; the database is the
source of truth, so a task the broker lost (a Redis restarted empty, a worker killed with tasks it had
reserved) is found from the rows. What used to happen: every ``queued`` row older than the recovery
window was re-published each window whether or not its task was still waiting behind a backlog (30,324
``republished`` entries for 20,200 messages in one run), and a Redis restart left its lost tasks waiting
the whole window (120 s).

Now:

* **behind a backlog, nothing is re-published**: a row whose window passed while its send queue still
  holds tasks is looked at again a window later, with no entry and no publish, until it has waited
  ``SMSGW_REPUBLISH_MAX_WAIT_SECONDS`` (then once, in case its task alone was lost);
* **a broker that came back empty** is noticed by the sweep within about ``BROKER_CHECK_SECONDS``: on
  Redis a key the sweep keeps there disappears with the data (it is re-created and every row published
  before is re-published at once, ``reason: broker_restarted``); on any broker, a send queue that is
  empty while rows published to it more than ``SMSGW_TASK_LOST_AFTER_SECONDS`` ago are still ``queued``
  means their tasks are gone (``reason: task_lost``);
* each real re-publication writes one ``republished`` entry saying why.

An empty send queue proves a task lost only once it has stayed empty for
``SMSGW_TASK_LOST_AFTER_SECONDS``: a worker that has just reserved a task (taken it off the queue,
unacknowledged) has not yet claimed its rows, and on a loaded machine that gap lasts seconds. Each process
remembers when it last saw each send queue with a backlog; a process that never saw one (just started)
goes by the rows' ``published_at`` alone, as before.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import connection

from scheduling.lifecycle.reasons import ReasonCode
from scheduling.models import Message, Priority, Status
from smsgw.runtime import broker
from smsgw.runtime.queues import SEND_PREFIX

if TYPE_CHECKING:
    import redis

log = logging.getLogger(__name__)

# Reasons a released row carries while its task waits in the broker (release._release sets them).
PUBLISHED_REASONS = ("", ReasonCode.CIRCUIT_PROBE)
# the row's task is presumed gone: re-publish at the next pass, whatever the depth
REASON_LOST = ReasonCode.TASK_LOST
BROKER_CHECK_SECONDS = 1.0
EPOCH_KEY = "smsgw:broker-epoch"
TABLE = Message._meta.db_table

_last_check = 0.0
# Send queue -> when this process last saw tasks ready in it (time.monotonic()).
_backlog_seen: dict[str, float] = {}


def _observe(depths: dict[str, int | None]) -> None:
    now = time.monotonic()
    for queue, depth in depths.items():
        if depth:
            _backlog_seen[queue] = now


def _empty_long_enough(queue: str) -> bool:
    """The queue has been empty for the whole lost-task wait, as far as this process saw: a task taken
    off it since (by a worker that has not claimed its rows yet) is not taken for lost."""
    seen = _backlog_seen.get(queue)
    return seen is None or time.monotonic() - seen >= settings.TASK_LOST_AFTER_SECONDS


def send_queue(priority: str) -> str:
    """The queue a priority's send tasks are published to (scheduling.dispatch.release) and counted in
    (here)."""
    return SEND_PREFIX + priority


def stale_split(rows: list[dict], now: datetime) -> tuple[list[dict], list[tuple[dict, datetime]], dict]:
    """Of the claimed rows, the stale published ones (their recovery time came, their task not claimed):
    which to re-publish, which to look at again later (their queue has a backlog). Returns (rows to go on
    with, rows to defer with their next look, why each re-published one goes)."""
    stale = [
        r
        for r in rows
        if r["status"] == Status.QUEUED
        and r["reason_code"] in (*PUBLISHED_REASONS, REASON_LOST)
        and r.get("published_at") is not None  # never published (a hold released, a retry): just due
    ]
    if not stale:
        return rows, [], {}
    lost = [r for r in stale if r["reason_code"] != REASON_LOST]
    depths = broker.queue_depths(sorted({send_queue(r["priority"]) for r in lost})) if lost else {}
    _observe(depths)
    window = timedelta(seconds=settings.QUEUED_RECOVERY_SECONDS)
    max_wait = timedelta(seconds=settings.REPUBLISH_MAX_WAIT_SECONDS)
    defer: list[tuple[dict, datetime]] = []
    why: dict[int, str] = {}
    deferred_ids: set[int] = set()
    for r in stale:
        if r["reason_code"] == REASON_LOST:
            why[r["id"]] = r.get("status_reason") or "its task was lost by the broker"
            continue
        depth = depths.get(send_queue(r["priority"]))
        published = r["published_at"]
        if depth is None:  # the broker cannot be asked: publishing into it would not help either
            defer.append((r, now + window))
            deferred_ids.add(r["id"])
        elif depth > 0 and now - published < max_wait:
            defer.append((r, now + window))  # still behind a backlog: look again later, no entry
            deferred_ids.add(r["id"])
        elif depth > 0:
            why[r["id"]] = f"not claimed {int((now - published).total_seconds())} s after it was published"
        elif not _empty_long_enough(send_queue(r["priority"])):
            # Emptied a moment ago: a worker most likely holds its task and is about to claim it.
            defer.append((r, now + timedelta(seconds=settings.TASK_LOST_AFTER_SECONDS)))
            deferred_ids.add(r["id"])
        else:
            why[r["id"]] = "its send queue is empty but it was never claimed: its task was lost"
    return [r for r in rows if r["id"] not in deferred_ids], defer, why


def lost_tasks_mark(now: datetime) -> int:
    """At most once per BROKER_CHECK_SECONDS per process (the sweep calls it each pass): mark the rows
    whose tasks the broker no longer has, so that this pass re-publishes them. Returns how many."""
    global _last_check
    if time.monotonic() - _last_check < BROKER_CHECK_SECONDS:
        return 0
    _last_check = time.monotonic()
    marked = 0
    if _redis_restarted():
        marked += _mark(now, None, "the broker restarted empty: its tasks were lost", published_before=now)
    after = timedelta(seconds=settings.TASK_LOST_AFTER_SECONDS)
    priorities = tuple(Priority.values)
    depths = broker.queue_depths([send_queue(p) for p in priorities])
    _observe(depths)
    for priority in priorities:
        if depths[send_queue(priority)] == 0 and _empty_long_enough(send_queue(priority)):
            marked += _mark(
                now,
                priority,
                "its send queue was empty but it was never claimed: its task was lost",
                published_before=now - after,
            )
    if marked:
        log.warning("recovery: %d queued messages whose tasks were lost are re-published", marked)
    return marked


def _mark(now: datetime, priority: str | None, why: str, *, published_before: datetime) -> int:
    placeholders = ", ".join(["%s"] * len(PUBLISHED_REASONS))
    where = (
        f'"status" = %s AND "run_after" > %s AND "reason_code" IN ({placeholders}) AND "published_at" < %s'
    )
    params: list = [Status.QUEUED, now, *PUBLISHED_REASONS, published_before]
    if priority is not None:
        where += ' AND "priority" = %s'
        params.append(priority)
    with connection.cursor() as cur:
        cur.execute(
            f'UPDATE "{TABLE}" SET "run_after" = %s, "reason_code" = %s, "status_reason" = %s '  # noqa: S608
            f"WHERE {where}",
            [now, REASON_LOST, why[:255], *params],
        )
        return cur.rowcount


_epoch: dict[str, redis.Redis] = {}


def _redis_restarted() -> bool:
    """On a Redis broker: the sweep keeps a key there; a Redis that restarted without persistence (or was
    flushed) has lost it together with every task. The first sweep to find it missing re-creates it
    (SET NX: only one sweeper wins) and reports the loss. Other brokers keep their messages across a
    restart (RabbitMQ's durable queues and persistent messages, the filesystem transport's files)."""
    url = settings.CELERY_BROKER_URL
    if not url.startswith(("redis://", "rediss://")):
        return False
    try:
        client = _epoch.get("client")
        if client is None:
            import redis

            client = _epoch["client"] = redis.Redis.from_url(
                url, socket_timeout=2, socket_connect_timeout=2, health_check_interval=10
            )
        if client.exists(EPOCH_KEY):
            return False
        won = bool(client.set(EPOCH_KEY, uuid.uuid4().hex, nx=True))
    except Exception as exc:  # the broker is down: nothing to decide until it is back
        log.debug("recovery: broker epoch unavailable: %s", type(exc).__name__)
        return False
    if won:
        log.warning("recovery: the broker has no epoch key: it restarted empty (or is new)")
    return won
