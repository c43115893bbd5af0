"""/healthz: the process answers (a liveness probe: restart it when this fails).
/readyz: it can do its work: the database answers a query and the broker accepts a connection (a
readiness probe: take it out of the load balancer when this fails, 503).

Readiness also reports sweep liveness, the time since any process last completed a sweep pass
(smsgw.observability.models.Heartbeat). A stale sweep does not make the web process unready by default:
the API still accepts and schedules, and pulling every web process out of the load balancer because a
worker host stalled would turn a delay into an outage. ``/readyz?sweep=1`` (for a sweep worker's own
check, or a deploy gate) answers 503 when the sweep is stale too; the alert is on the metric.

It reports every routed queue too (smsgw.observability.queues): messages ready, live consumers, and how
long it has had work waiting with no consumer; ``queues.unconsumed`` names those past
SMSGW_QUEUE_UNCONSUMED_SECONDS. For the same reason as the sweep, a queue without a consumer does not make
the web unready (the API still accepts; the missing worker is what to fix, and the SmsgwQueueUnconsumed
alert says which); ``/readyz?queues=1`` (a deploy gate, a worker host's check) answers 503 then.

/readyz needs no credentials (load balancers probe it), so it must not be a way to make the gateway open
broker connections: the broker's answer (reachable, and each queue's depth) is kept per process for
SMSGW_READYZ_BROKER_SECONDS and asked by one request at a time, so any number of probes per second cost
at most one broker check per process per interval. The database parts (SELECT 1, the sweep heartbeat,
the consumer rows) are read on every call: one pooled connection, no new one per probe.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import JsonResponse


def healthz(request):
    return JsonResponse({"status": "ok"})


def _database() -> str | None:
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
    except Exception as exc:  # readiness reports, it does not raise
        return type(exc).__name__
    return None


def _broker() -> str | None:
    from celery import current_app as app  # config.celery's app, current once loaded

    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:
        return type(exc).__name__
    return None


@dataclass(frozen=True)
class BrokerAnswer:
    error: str | None  # None: it accepted a connection
    depths: dict[str, int | None] | None  # each routed queue's ready messages; None while unreachable
    url: str
    at: float


class BrokerCheck:
    """The broker's last answer, asked again once it is SMSGW_READYZ_BROKER_SECONDS old, by one thread
    while the others wait for it (a burst of probes must not open a connection each)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answer: BrokerAnswer | None = None
        self.checks = 0  # broker checks made since the last clear (each opens at most two connections)

    def answer(self) -> BrokerAnswer:
        from celery import current_app as app  # config.celery's app, current once loaded

        url = str(app.conf.broker_write_url or app.conf.broker_url)
        with self._lock:
            current = self._answer
            if (
                current is None
                or current.url != url  # reconfigured (tests point it elsewhere): not the same broker
                or time.monotonic() - current.at >= settings.READYZ_BROKER_SECONDS
            ):
                current = self._answer = self._ask(url)
            return current

    def _ask(self, url: str) -> BrokerAnswer:
        from smsgw.runtime import broker
        from smsgw.runtime.queues import ROUTED_QUEUES

        self.checks += 1
        error = _broker()
        depths = None if error else broker.queue_depths(list(ROUTED_QUEUES))
        return BrokerAnswer(error, depths, url, time.monotonic())

    def clear(self) -> None:
        with self._lock:
            self._answer = None
            self.checks = 0


broker_check = BrokerCheck()


def _sweep() -> dict:
    from smsgw.observability.heartbeat import sweep_age_seconds

    try:
        age = sweep_age_seconds()
    except Exception as exc:  # the database check reports the database
        return {"error": type(exc).__name__, "stale": True}
    stale = age is None or age > settings.SWEEP_STALE_SECONDS
    return {"age_seconds": None if age is None else round(age, 1), "stale": stale}


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)


def _queues(depths: dict[str, int | None] | None) -> dict:
    from smsgw.observability.queues import queue_states_observe

    try:
        states = queue_states_observe(depths=depths)
    except Exception as exc:  # the database check reports the database
        return {"error": type(exc).__name__, "unconsumed": []}
    threshold = settings.QUEUE_UNCONSUMED_SECONDS
    return {
        "unconsumed": [s.name for s in states if (s.unconsumed_seconds or 0.0) > threshold],
        "by_queue": {
            s.name: {
                "ready": s.ready,
                "consumers": s.consumers,
                "unconsumed_seconds": _rounded(s.unconsumed_seconds),
            }
            for s in states
        },
    }


def _asked(request, name: str) -> bool:
    return request.GET.get(name) in ("1", "true", "yes")


def readyz(request):
    db_error, broker = _database(), broker_check.answer()
    broker_error = broker.error
    body: dict[str, Any] = {
        "database": db_error or connection.vendor,
        "broker": broker_error or "ok",
        "sweep": _sweep() if db_error is None else {"stale": True},
        "queues": (
            _queues(broker.depths)
            if db_error is None and broker_error is None
            else {"error": "database" if db_error else "broker", "unconsumed": []}
        ),
    }
    ready = db_error is None and broker_error is None
    if _asked(request, "sweep") and body["sweep"]["stale"]:
        ready = False
    if _asked(request, "queues") and body["queues"]["unconsumed"]:
        ready = False
    body["status"] = "ok" if ready else "unavailable"
    response = JsonResponse(body, status=200 if ready else 503)
    # A probe polls every few seconds: its 503 says why in the body and in /metrics. Without this mark
    # django.request logged an ERROR line per probe (django.utils.log.log_response skips a marked one).
    response._has_been_logged = True  # type: ignore[attr-defined]  # Django's private mark, not in the stubs
    return response
