"""Beat's ticks expire: while no worker takes them (workers busy or down), sweep ticks wait in the broker,
and when a worker comes back it discards the stale ones instead of replaying each of them (django-celery-
beat's DatabaseScheduler used to drop the ``expires`` option: 434 stale ticks after 8 minutes)."""

from __future__ import annotations

import re

import pytest

from smsgw.runtime.broker import queue_depths

pytestmark = pytest.mark.integration


def test_sweep_ticks_that_waited_past_their_expiry_are_discarded_not_run(pipeline):
    pipeline.env["SMSGW_LOG_TICKS"] = "1"  # keep the per-tick lines this test counts
    beat = pipeline.beat()
    # No sweep worker yet: ticks pile up in the broker, one per second.
    pipeline.wait_until(lambda: (queue_depths(["sweep"])["sweep"] or 0) >= 8, 60, "8 sweep ticks waiting")
    beat.stop()
    waiting = queue_depths(["sweep"])["sweep"]
    # Ticks expire two intervals (2 s) after beat sent them; a worker that starts now finds every one
    # of them stale by the time it reads them, except at most the last two or three.
    worker = pipeline.worker("late", queues="sweep", concurrency=1)
    pipeline.wait_until(lambda: queue_depths(["sweep"])["sweep"] == 0, 60, "the sweep queue to drain")
    pipeline.wait_until(
        lambda: len(re.findall(r"Discarding revoked task: scheduling\.sweep", worker.log())) >= waiting - 3,
        30,
        "stale ticks to be discarded",
    )
    log = worker.log()
    discarded = len(re.findall(r"Discarding revoked task: scheduling\.sweep", log))
    ran = len(re.findall(r"Task scheduling\.sweep\[[^\]]+\] succeeded", log))
    assert waiting >= 8
    assert discarded >= waiting - 3, log[-3000:]
    assert ran <= 3, f"{ran} stale sweep ticks were run\n{log[-3000:]}"
