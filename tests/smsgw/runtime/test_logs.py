"""Log hygiene: a repeated error once per window, with a count of what was left out; periodic ticks
leave no INFO line; everything else passes untouched."""

from __future__ import annotations

import logging

from smsgw.runtime.logs import QuietTicks, RepeatLimit


def record(name, level, msg, args=None):
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_a_repeated_error_is_written_once_per_window_then_with_the_count(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("smsgw.runtime.logs.time.monotonic", lambda: clock[0])
    f = RepeatLimit(window=10)
    first = record("celery.beat", logging.ERROR, "beat: Connection error: %s. Trying again", ("refused",))
    assert f.filter(first)
    assert [f.filter(record("celery.beat", logging.ERROR, first.msg, ("refused",))) for _ in range(30)] == [
        False
    ] * 30
    other = record("celery.beat", logging.ERROR, "another message")
    assert f.filter(other), "a different message is not held back"
    clock[0] += 10.5
    later = record("celery.beat", logging.ERROR, first.msg, ("refused",))
    assert f.filter(later)
    assert (
        later.getMessage()
        == "beat: Connection error: refused. Trying again [30 more like this in the last 10 s]"
    )
    assert f.filter(record("x", logging.INFO, first.msg)), "INFO is never rate-limited"


def test_tick_lines_are_dropped_at_info_and_other_tasks_are_kept(monkeypatch):
    monkeypatch.delenv("SMSGW_LOG_TICKS", raising=False)
    f = QuietTicks()
    received = "Task %(name)s[%(id)s] received"
    assert not f.filter(
        record("celery.worker.strategy", logging.INFO, received, ({"name": "scheduling.sweep", "id": "1"},))
    )
    assert not f.filter(
        record(
            "celery.app.trace",
            logging.INFO,
            "Task %(name)s[%(id)s] succeeded in %(runtime)ss",
            ({"name": "receipts.process", "id": "1", "runtime": 1},),
        )
    )
    assert not f.filter(
        record(
            "celery.beat",
            logging.INFO,
            "Scheduler: Sending due task %s (%s)",
            ("smsgw-sweep", "scheduling.sweep"),
        )
    )
    assert f.filter(
        record(
            "celery.worker.strategy", logging.INFO, received, ({"name": "delivery.send_batch", "id": "2"},)
        )
    )
    discarded = "Discarding revoked task: %s[%s]"
    assert not f.filter(record("celery.worker.request", logging.INFO, discarded, ("receipts.process", "4")))
    assert f.filter(record("celery.worker.request", logging.INFO, discarded, ("delivery.send_batch", "5")))
    assert f.filter(record("celery.beat", logging.INFO, "beat: Starting..."))
    failed = record(
        "celery.app.trace",
        logging.ERROR,
        "Task %(name)s[%(id)s] raised",
        ({"name": "scheduling.sweep", "id": "3"},),
    )
    assert f.filter(failed), "a tick's failure is always written"
    monkeypatch.setenv("SMSGW_LOG_TICKS", "1")
    assert QuietTicks().filter(
        record(
            "celery.beat",
            logging.INFO,
            "Scheduler: Sending due task %s (%s)",
            ("smsgw-sweep", "scheduling.sweep"),
        )
    )
