"""Log noise from real worker and beat processes: an idle gateway writes nothing per tick, and a broker
outage leaves a few lines per 10 s, not several a second (docs/operations.md, logs: beat wrote about 3 error
lines a second through an outage, workers an AttributeError from gossip after each reconnect, and idle
processes an INFO line per tick)."""

from __future__ import annotations

import re
import shutil
import time
from collections import defaultdict
from datetime import datetime

import pytest
import redis
from django.db import connection

from bench.harness.devprocs import RedisServer
from config.celery import app
from scheduling.models import Message, Status
from tests import processes
from tests.factories import RECIPIENT, message, tenant_with_key

pytestmark = pytest.mark.integration

WORKER_READY = "ready."
BEAT_READY = "beat: Starting..."
TICK_LINES = ("Task scheduling.sweep[", "receipts.process[", "deliver_webhooks[", "Sending due task")
# Celery's log format: "[2026-12-01 11:58:22,123: ERROR/MainProcess] message"
RECORD = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}): (\w+)/([^\]]+)\] (.*)$", re.MULTILINE)
REPEAT_WINDOW = 10.0
AT_MOST_PER_WINDOW = 3  # RepeatLimit writes one per window; a sliding window can hold two, plus slack


def started_worker(pipeline, name: str) -> tuple[processes.Proc, float]:
    """A worker on every queue, and the seconds from its start to its "ready." line (pipeline.worker
    blocks until then)."""
    started = time.monotonic()
    # Four processes: the sweep, receipts and webhooks ticks each hold one for ~0.9 of their 1-s interval
    # (bounded polling passes), so with two the sweep ticks waited past their expiry and were discarded.
    worker = pipeline.worker(name, queues=processes.ALL_QUEUES, concurrency=4)
    ready_in = time.monotonic() - started
    print(f"worker {name}: ready {ready_in:.1f} s after start")
    return worker, ready_in


def lines_after(log: str, marker: str) -> list[str]:
    return [line for line in log[log.index(marker) + len(marker) :].splitlines() if line.strip()]


def sweeps_run(node_prefix: str) -> int:
    """The worker's own count of sweep tasks it ran (remote control ``stats``): an observable that needs
    no log line and no beat sync (django-celery-beat writes total_run_count every 3 minutes only)."""
    replies = app.control.inspect(timeout=3).stats() or {}
    return sum(
        stats.get("total", {}).get("scheduling.sweep", 0)
        for node, stats in replies.items()
        if node.startswith(node_prefix)
    )


def template(text: str) -> str:
    """A message with its varying parts (ports, counters, seconds, task ids, addresses) made alike."""
    text = re.sub(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "<id>", text)
    text = re.sub(r"0x[0-9a-fA-F]+", "<hex>", text)
    return re.sub(r"\d+(\.\d+)?", "#", text)


def crowded_templates(log: str) -> dict[str, int]:
    """Each WARNING/ERROR/CRITICAL template (per process) seen more than AT_MOST_PER_WINDOW times within
    one sliding REPEAT_WINDOW, with the most seen in a window."""
    times: dict[tuple[str, str], list[float]] = defaultdict(list)
    for stamp, millis, level, process, text in RECORD.findall(log):
        if level in ("WARNING", "ERROR", "CRITICAL"):
            at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp() + int(millis) / 1000
            times[(process, f"{level} {template(text)}")].append(at)
    crowded = {}
    for (process, text), stamps in times.items():
        stamps.sort()
        most = max(
            sum(1 for later in stamps[i:] if later - first < REPEAT_WINDOW) for i, first in enumerate(stamps)
        )
        if most > AT_MOST_PER_WINDOW:
            crowded[f"{process}: {text}"] = most
    return crowded


def test_idle_worker_and_beat_write_no_line_per_tick(pipeline):
    """Nothing to do: beat sends a sweep (and receipts, webhooks, probe) tick every second and a worker on
    every queue runs them. After several sweeps, neither process has written a line per tick, and only
    a handful of lines at all since it was ready."""
    worker, ready_in = started_worker(pipeline, "idle")
    beat = pipeline.beat()
    pipeline.wait_until(lambda: sweeps_run("idle@") >= 5, 120, "the worker to run 5 sweep ticks")
    worker_lines = lines_after(worker.log(), WORKER_READY)
    beat_lines = lines_after(beat.log(), BEAT_READY)
    for line in worker_lines + beat_lines:
        assert not any(tick in line for tick in TICK_LINES), f"a per-tick line: {line}"
    assert len(worker_lines) <= 5, "\n".join(worker_lines[-40:])
    assert len(beat_lines) <= 5, "\n".join(beat_lines[-40:])
    assert ready_in < 90


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_broker_killed_for_15_s_logs_each_error_a_few_times_per_window_then_sends(pipeline):
    """The worker's and beat's broker is killed -9 and kept down for 15 s, then started again empty. Through
    the outage each distinct warning or error is written at most a few times per 10 s (beat used to write
    about 3 a second); neither process logs an AttributeError (gossip after a reconnect); and a message
    that falls due after the restart is sent, submitted once."""
    redis_server = RedisServer()
    redis_server.start()
    try:
        pipeline.env["CELERY_BROKER_URL"] = redis_server.url
        worker, ready_in = started_worker(pipeline, "outage")
        beat = pipeline.beat()
        # Both connected and working before the kill: beat has published ticks the worker ran (a beat
        # killed before its first publish only ever logs its connect retries, with a back-off).
        broker = redis.Redis.from_url(redis_server.url, socket_timeout=5)
        pipeline.wait_until(
            lambda: (
                broker.info("commandstats").get("cmdstat_lpush", {}).get("calls", 0) >= 15
                and not broker.llen("sweep")
            ),
            120,
            "beat to publish 15 ticks and the worker to take them",
        )
        worker_at_kill, beat_at_kill = len(worker.log()), len(beat.log())
        redis_server.kill9()
        killed = time.monotonic()
        pipeline.wait_until(
            lambda: re.search(r": (ERROR|WARNING|CRITICAL)/", beat.log()[beat_at_kill:]) is not None,
            60,
            "beat to log that the broker is gone",
        )
        pipeline.wait_until(lambda: time.monotonic() - killed >= 15, 60, "15 s of outage")
        worker_at_restart, beat_at_restart = len(worker.log()), len(beat.log())
        redis_server.start()  # empty

        tenant, _ = tenant_with_key("acme")
        due = message(tenant, due_in=0)
        connection.close()
        pipeline.wait_all_final([due.pk], timeout=120)
        assert Message.objects.get(pk=due.pk).status == Status.SENT
        assert pipeline.submissions_by_recipient() == {RECIPIENT: 1}, "submitted exactly once"

        worker_log, beat_log = worker.log(), beat.log()
        outage = {
            "worker": worker_log[worker_at_kill:worker_at_restart],
            "beat": beat_log[beat_at_kill:beat_at_restart],
        }
        for name, log in outage.items():
            crowded = crowded_templates(log)
            assert not crowded, f"{name} repeated errors during the outage: {crowded}\n{log[-4000:]}"
        assert "AttributeError" not in worker_log, worker_log[-4000:]
        assert "AttributeError" not in beat_log, beat_log[-4000:]
        assert ready_in < 90
    finally:
        pipeline.stop()
        redis_server.stop()
