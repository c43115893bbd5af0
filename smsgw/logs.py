"""Log hygiene for long-running processes: a repeated error is written once per window, not several times
a second through an outage, and the periodic ticks (sweep, receipts, webhooks, probes) leave no INFO
line each time they run, so an idle gateway's logs stay quiet and a real event stands out.

Installed on every handler of the root logger: by ``LOGGING`` in the web processes, and through Celery's
``after_setup_logger`` signal in workers and beat (smsgw.celery).
"""

from __future__ import annotations

import logging
import os
import threading
import time

# Beat's periodic tasks (settings.CELERY_BEAT_SCHEDULE): their "received", "succeeded", "Sending due task"
# and "Discarding revoked task" lines are dropped at INFO (a tick that waited past its expiry is discarded
# by design, a newer one covers the same work: a worker on every queue discarded several a second idle).
# SMSGW_LOG_TICKS=1 keeps them (debugging, and a test that counts runs).
TICK_TASKS = frozenset(
    {
        "scheduling.sweep",
        "scheduling.materialize",
        "receipts.process",
        "receipts.deliver_webhooks",
        "delivery.holds_probe",
        "delivery.circuit_probe",
        "receipts.status_lookup",
    }
)
_TICK_LOGGERS = frozenset(
    {"celery.app.trace", "celery.worker.strategy", "celery.worker.request", "celery.beat"}
)


class QuietTicks(logging.Filter):
    def __init__(self, name: str = "") -> None:
        super().__init__(name)
        self.enabled = os.environ.get("SMSGW_LOG_TICKS", "") not in ("1", "true", "yes")

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.enabled or record.levelno != logging.INFO or record.name not in _TICK_LOGGERS:
            return True
        args = record.args
        if isinstance(args, dict):  # celery.app.trace / strategy: {"name": task, "id": ...}
            return args.get("name") not in TICK_TASKS
        if isinstance(args, tuple) and len(args) == 2 and str(record.msg).startswith("Scheduler: Sending"):
            return args[1] not in TICK_TASKS
        if isinstance(args, tuple) and len(args) == 2 and str(record.msg).startswith("Discarding revoked"):
            return args[0] not in TICK_TASKS  # celery.worker.request: (task name, id)
        return True


class RepeatLimit(logging.Filter):
    """A WARNING or worse with the same logger and message template as one written less than ``window``
    seconds ago is counted instead of written; the next one written says how many were left out."""

    def __init__(self, name: str = "", window: float | None = None) -> None:
        super().__init__(name)
        self.window = float(os.environ.get("SMSGW_LOG_REPEAT_WINDOW", "10")) if window is None else window
        self._seen: dict[tuple, list] = {}  # key -> [last written (monotonic), suppressed count]
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or self.window <= 0:
            return True
        key = (record.name, record.levelno, str(record.msg)[:200])
        now = time.monotonic()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen[0] < self.window:
                seen[1] += 1
                return False
            left_out = seen[1] if seen is not None else 0
            self._seen[key] = [now, 0]
            if len(self._seen) > 1000:  # bounded: forget the oldest keys
                for old in sorted(self._seen, key=lambda k: self._seen[k][0])[:500]:
                    del self._seen[old]
        if left_out:
            record.msg = f"{record.getMessage()} [{left_out} more like this in the last {self.window:g} s]"
            record.args = None
        return True


def handlers_quiet(logger: logging.Logger | None = None) -> None:
    """Add both filters to every handler of ``logger`` (the root logger by default), once."""
    logger = logger or logging.getLogger()
    for handler in logger.handlers:
        if not any(isinstance(f, RepeatLimit) for f in handler.filters):
            handler.addFilter(RepeatLimit())
        if not any(isinstance(f, QuietTicks) for f in handler.filters):
            handler.addFilter(QuietTicks())
