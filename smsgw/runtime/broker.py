"""What the broker holds, asked the same way for every transport (Redis, RabbitMQ, the embedded filesystem
transport): a passive queue declare answers the number of messages ready in a queue. Used by the sweep
to tell a stale ``queued`` row whose task is still waiting in the broker (behind a backlog) from one whose
task was lost, and to notice a broker that came back empty.

Messages a worker has already reserved (prefetched, unacknowledged) are not counted: with a prefetch of
one per process they are few and run within seconds.
"""

from __future__ import annotations

import contextlib
import logging

log = logging.getLogger(__name__)


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
