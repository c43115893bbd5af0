"""The worker's consumer (settings.CELERY_WORKER_CONSUMER): Celery's own, with its handling of a message it
cannot run kept (set the message aside, go on) and its log lines made safe.

Celery already survives a broker message it cannot run: a body that does not decode is acknowledged, an
unknown task name or an invalid message is rejected without requeue (celery/worker/consumer/consumer.py,
``on_decode_error``, ``on_unknown_task``, ``on_invalid_task``, ``on_unknown_message``). But each of those
writes the message's body into the log (``dump_body``), and a task's arguments and headers are not for
logs here (smsgw.runtime.logs). This consumer writes one line naming the queue, the task name and the reason,
counts the message (``smsgw_broker_discarded_total``), and then does what Celery does. On RabbitMQ the
rejected message goes to the dead-letter exchange (deploy/rabbitmq/definitions.json); on Redis and the
filesystem transport it is gone. Either way it is never redelivered, so it cannot loop.

Messages the transport itself cannot read (an empty file, a list item that is not JSON) never get this
far: smsgw.runtime.transports sets them aside.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from celery import signals
from celery.worker.consumer import Consumer as CeleryConsumer

if TYPE_CHECKING:
    from celery.events.dispatcher import EventDispatcher

log = logging.getLogger(__name__)


def _queue(message) -> str:
    info = message.delivery_info or {}
    return str(info.get("routing_key") or info.get("exchange") or "unknown")


def _task_name(message) -> str:
    headers = message.headers if isinstance(message.headers, dict) else {}
    return str(headers.get("task") or "-")[:200]


class Consumer(CeleryConsumer):
    # Set by Celery's Consumer (__init__ and its Events step); celery-types does not declare them.
    connection_errors: tuple[type[BaseException], ...]
    event_dispatcher: EventDispatcher | None

    def _discarded(self, message, reason: str, exc: BaseException | None) -> None:
        from smsgw.observability.events import broker_discarded_count

        queue = _queue(message)
        log.error(
            "broker: discarded a message on queue %s (task %s, %s: %s); the worker goes on",
            queue,
            _task_name(message),
            reason,
            type(exc).__name__ if exc is not None else "no task header",
        )
        broker_discarded_count(queue=queue, reason=reason)

    def on_decode_error(self, message, exc):
        self._discarded(message, "undecodable", exc)
        message.ack()  # as Celery does: acknowledged, so it does not come back

    def on_unknown_message(self, body, message):
        self._discarded(message, "not_a_task", None)
        message.reject_log_error(log, self.connection_errors)
        signals.task_rejected.send(sender=self, message=message, exc=None)

    def on_unknown_task(self, body, message, exc):
        self._discarded(message, "unknown_task", exc)
        message.reject_log_error(log, self.connection_errors)
        headers = message.headers if isinstance(message.headers, dict) else {}
        if self.event_dispatcher and headers.get("id"):
            self.event_dispatcher.send(
                "task-failed", uuid=headers["id"], exception=f"NotRegistered({_task_name(message)!r})"
            )
        signals.task_unknown.send(
            sender=self, message=message, exc=exc, name=headers.get("task"), id=headers.get("id")
        )

    def on_invalid_task(self, body, message, exc):
        self._discarded(message, "invalid", exc)
        message.reject_log_error(log, self.connection_errors)
        signals.task_rejected.send(sender=self, message=message, exc=exc)
