"""What the broker holds, asked the same way for every transport (Redis, RabbitMQ, the embedded filesystem
transport): a passive queue declare answers the number of messages ready in a queue. Used by the sweep
to tell a stale ``queued`` row whose task is still waiting in the broker (behind a backlog) from one whose
task was lost, and to notice a broker that came back empty.

Messages a worker has already reserved (prefetched, unacknowledged) are not counted: with a prefetch of
one per process they are few and run within seconds.

How long the oldest ready message of a queue has waited (``queue_oldest_ages``): every task message
carries the instant it was published in its headers (``published_at_stamp``, connected to Celery's
``before_task_publish`` in config.celery), and the head of the queue is read without consuming it. On
Redis that is one LINDEX per priority list of the queue, in one pipeline (kombu pushes on the left and
pops on the right: the right end is the oldest); on the embedded filesystem broker, the first file of the
queue's folder listing (file names begin with the publish instant). RabbitMQ cannot show a queue's head
without delivering it (a basic.get and a requeue would count as a delivery against the quorum queue's
delivery limit and move the message) and its management API is not used here: its queues' ages are not
known, and only their depth is reported.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time

log = logging.getLogger(__name__)

# The task message header that holds the Unix time it was published (set again on each publish: a
# retried task is a new message, and waits from its own publish).
PUBLISHED_AT = "smsgw_published_at"


def published_at_stamp(headers=None, **_kwargs) -> None:
    """Celery's ``before_task_publish``: the publish instant, into the message's headers."""
    if isinstance(headers, dict):
        headers[PUBLISHED_AT] = time.time()


def queue_depths(names: list[str]) -> dict[str, int | None]:
    """Ready messages per queue; 0 for a queue the broker does not have (never declared, or the broker
    restarted empty); None for all when the broker cannot be reached (the caller decides nothing then)."""
    from celery import current_app as app  # config.celery's app, current once loaded

    depths: dict[str, int | None] = {}
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            channel = None
            try:
                for name in names:
                    # One channel for all the queues while it stays open: on Redis each new channel is a
                    # new client and connection (about 4 ms each, most of a readiness probe's cost).
                    if channel is None or not _open(channel):
                        _close(channel)
                        channel = conn.channel()
                    try:
                        # Every transport's channel declares queues; the stubs' StdChannel does not list it.
                        declared = channel.queue_declare(queue=name, passive=True)  # type: ignore[attr-defined]
                        depths[name] = int(declared.message_count)
                    except conn.channel_errors:  # NOT_FOUND: no such queue, so nothing waits in it
                        depths[name] = 0
            finally:
                _close(channel)
    except Exception as exc:  # the broker is down: no decision from its depth
        log.warning("broker: queue depth unavailable: %s", type(exc).__name__)
        return dict.fromkeys(names)
    return depths


def _open(channel) -> bool:
    """A channel still usable after a channel error. RabbitMQ closes the channel on a passive declare's
    404 (py-amqp then reopens it, or leaves ``is_open`` false while closing); kombu's virtual transports
    (Redis, the filesystem) raise without closing it."""
    return getattr(channel, "is_open", True) and not getattr(channel, "closed", False)


def _close(channel) -> None:
    if channel is not None:
        with contextlib.suppress(Exception):  # a channel the broker already closed
            channel.close()


def queue_oldest_ages(names: list[str], *, now: float | None = None) -> dict[str, float | None]:
    """Seconds the oldest ready message of each queue has waited since it was published; 0.0 for an empty
    queue; None where the broker cannot tell (RabbitMQ, a broker that does not answer, a head message
    published without the header)."""
    from celery import current_app as app

    now = time.time() if now is None else now
    unknown: dict[str, float | None] = dict.fromkeys(names)
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            channel = conn.channel()
            try:
                if hasattr(channel, "priority_steps") and hasattr(channel, "client"):  # Redis
                    heads = _redis_heads(channel, names)
                elif hasattr(channel, "data_folder_in"):  # the embedded filesystem broker
                    heads = _folder_heads(channel.data_folder_in, names)
                else:
                    return unknown
            finally:
                _close(channel)
    except Exception as exc:
        log.warning("broker: queue ages unavailable: %s", type(exc).__name__)
        return unknown
    ages: dict[str, float | None] = {}
    for name in names:
        found = heads.get(name, [])
        if not found:
            ages[name] = 0.0
            continue
        stamps = [_published_at(raw) for raw in found]
        known = [t for t in stamps if t is not None]
        ages[name] = max(0.0, now - min(known)) if len(known) == len(stamps) else None
    return ages


def _redis_heads(channel, names: list[str]) -> dict[str, list[bytes]]:
    """Each queue's oldest message in each of its priority lists (kombu keeps one list per step)."""
    keys = [(name, channel._q_for_pri(name, pri)) for name in names for pri in channel.priority_steps]
    with channel.conn_or_acquire() as client:
        pipe = client.pipeline(transaction=False)
        for _, key in keys:
            pipe.lindex(key, -1)
        found = pipe.execute()
    heads: dict[str, list[bytes]] = {}
    for (name, _), raw in zip(keys, found, strict=True):
        if raw is not None:
            heads.setdefault(name, []).append(raw)
    return heads


def _folder_heads(folder: str, names: list[str]) -> dict[str, list[bytes]]:
    """Each queue's files of its earliest millisecond (``<monotonic ms>_<uuid>.<queue>.msg``: within one
    millisecond the uuid, not the publish order, sorts them)."""
    first: dict[str, list[str]] = {}
    for filename in sorted(os.listdir(folder)):
        queue = filename.partition(".")[2].removesuffix(".msg")
        if queue not in names:
            continue
        earliest = first.setdefault(queue, [filename])
        if filename not in earliest and filename.partition("_")[0] == earliest[0].partition("_")[0]:
            earliest.append(filename)
    heads: dict[str, list[bytes]] = {}
    for queue, filenames in first.items():
        for filename in filenames:
            # Consumed since the listing: the next one is the head until the next look.
            with contextlib.suppress(OSError), open(os.path.join(folder, filename), "rb") as f:
                heads.setdefault(queue, []).append(f.read())
    return heads


def _published_at(raw: bytes | str) -> float | None:
    try:
        headers = json.loads(raw).get("headers") or {}
        value = headers.get(PUBLISHED_AT)
        return float(value) if value is not None else None
    except (ValueError, TypeError, AttributeError):
        return None
