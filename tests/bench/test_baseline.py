"""The Celery ETA baseline's bookkeeping (the timed run itself is ``python -m bench burst``)."""

import os

from bench.scenarios import baseline
from bench.scenarios.ingest import _healthz_summary


def test_noop_records_its_own_run_and_ignores_tasks_left_by_an_earlier_run(tmp_path, monkeypatch):
    monkeypatch.setenv(baseline.RECORD_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(baseline.RUN_ENV, "this-run")
    monkeypatch.setattr(baseline, "_record_fd", None)
    try:
        baseline.noop.run("this-run")
        baseline.noop.run("an-interrupted-run")
        baseline.noop.run("this-run")
        times = baseline._run_times(str(tmp_path))
    finally:
        if baseline._record_fd is not None:
            os.close(baseline._record_fd)
    assert len(times) == 2
    assert times == sorted(times)


def test_healthz_summary_ratio_is_post_rate_over_healthz_rate():
    post = {"requests": 100, "elapsed": 2.0, "codes": {201: 100}, "p50_ms": 1, "p99_ms": 2}
    health = {"requests": 1000, "elapsed": 4.0, "codes": {200: 1000}, "p50_ms": 1, "p99_ms": 2}
    out = _healthz_summary(post, health)
    assert out["ratio_post_to_healthz"] == 0.2
    assert out["healthz"]["requests_per_s"] == 250.0
