"""Real worker and beat processes: their counters reach /metrics through the multiprocess files, their
log lines are JSON with the task id (SMSGW_LOG_FORMAT=json), and their task events reach a monitor the
way Flower reads them (SMSGW_CELERY_EVENTS, on in production)."""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from config.celery import app
from scheduling.models import Status
from tests.factories import messages_bulk, tenant_with_key
from tests.metrics import TOKEN, scrape, value

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


class EventMonitor(threading.Thread):
    """What Flower does: a Receiver on the broker's event exchange, counting events by type and task."""

    def __init__(self):
        super().__init__(daemon=True)
        self.seen: Counter = Counter()
        self.ready = threading.Event()
        self.receiver = None

    def run(self):
        with app.connection_for_read() as conn:
            self.receiver = app.events.Receiver(conn, handlers={"*": self._on_event})
            self.ready.set()
            self.receiver.capture(limit=None, timeout=None, wakeup=False)

    def _on_event(self, event):
        self.seen[(event["type"], event.get("name") or "")] += 1

    def stop(self):
        if self.receiver is not None:
            self.receiver.should_stop = True


def test_worker_counters_json_logs_and_task_events(pipeline, settings):
    settings.METRICS_TOKEN = TOKEN
    pipeline.env.update(SMSGW_LOG_FORMAT="json", SMSGW_CELERY_EVENTS="1", SMSGW_METRICS_TOKEN=TOKEN)
    tenant, _ = tenant_with_key("acme")
    before = value(scrape(Client()), "smsgw_messages_sent_total", priority="bulk")
    monitor = EventMonitor()
    monitor.start()
    assert monitor.ready.wait(10)
    ids = messages_bulk(tenant, 30, due_at=timezone.now(), priority="bulk")
    connection.close()
    try:
        worker = pipeline.worker("obs")
        pipeline.beat()
        pipeline.wait_all_final(ids, timeout=90, final=(Status.SENT, Status.DELIVERED))
        pipeline.wait_until(
            lambda: value(scrape(Client()), "smsgw_messages_sent_total", priority="bulk") - before >= 30,
            30,
            "the worker's counters in /metrics",
        )
        pipeline.wait_until(
            lambda: (
                monitor.seen[("task-succeeded", "")] + monitor.seen[("task-received", "delivery.send_batch")]
                > 0
            ),
            30,
            "task events from the worker",
        )
    finally:
        monitor.stop()
    assert monitor.seen[("task-received", "delivery.send_batch")] >= 1, monitor.seen
    s = scrape(Client())
    assert value(s, "smsgw_schedule_lag_seconds_count", priority="bulk") >= 30
    assert value(s, "smsgw_sweep_age_seconds") < 10

    lines = [line for line in worker.log().splitlines() if line.startswith("{")]
    records = [json.loads(line) for line in lines]
    assert records, worker.log()[-3000:]
    sweep_lines = [r for r in records if r.get("task_name") == "scheduling.sweep"]
    assert sweep_lines and all(r["task_id"] for r in sweep_lines), records[-5:]
    assert {"time", "level", "logger", "message"} <= set(sweep_lines[0])
