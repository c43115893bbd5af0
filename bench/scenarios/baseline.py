"""The Celery ETA baseline for ``bench burst``: the same number of no-op tasks, each published with one
common due moment as its ETA, on the gateway's broker, run by a real ``celery worker`` with the send
workers' concurrency and pool. It is what "one delayed task per message" costs on this machine before
any sending is done, so the burst's throughput is reported against it.

The worker runs ``celery -A bench.scenarios.baseline worker``; each pool process appends the wall-clock
time of every task it runs to its own file (an O_APPEND write, a few microseconds, and no broker or
database round trip that would slow the baseline down and flatter the gateway)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta

from celery import Celery

from bench.harness import devprocs

QUEUE = "bench.noop"
RECORD_DIR_ENV = "SMSGW_BENCH_NOOP_DIR"
RUN_ENV = "SMSGW_BENCH_NOOP_RUN"

# The gateway's own Celery settings (broker URL and transport options, acks_late, prefetch multiplier,
# serializer), so what differs from the send workers is the design, not the configuration.
# set_as_current=False: in the bench process smsgw's app stays the current one.
app = Celery("bench_baseline", set_as_current=False)
app.config_from_object("django.conf:settings", namespace="CELERY")

_record_fd: int | None = None


@app.task(name="bench.noop", ignore_result=True)
def noop(run: str) -> None:
    global _record_fd
    # Tasks left on the queue by an interrupted earlier run are consumed and not counted.
    if run != os.environ.get(RUN_ENV):
        return
    if _record_fd is None:
        path = os.path.join(os.environ[RECORD_DIR_ENV], f"{os.getpid()}.log")
        _record_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.write(_record_fd, b"%.6f\n" % time.time())


def _run_times(record_dir: str) -> list[float]:
    out: list[float] = []
    for name in os.listdir(record_dir):
        with open(os.path.join(record_dir, name)) as f:
            out += [float(line) for line in f if line.endswith("\n")]
    return out


def eta_noop(
    *, n: int, concurrency: int, pool: str, lead_seconds: float, timeout: float, env: dict[str, str]
) -> dict:
    """n no-op tasks with eta = now + lead_seconds, consumed by one worker; rate = n / (last run - due)."""
    from bench.harness.sampling import MemorySampler

    run = uuid.uuid4().hex
    record_dir = tempfile.mkdtemp(prefix="smsgw-noop-")
    worker_env = {**env, RECORD_DIR_ENV: record_dir, RUN_ENV: run}
    # The flags devprocs.celery_worker gives the send workers, another app and queue.
    argv = [
        str(devprocs.BIN / "celery"),
        *("-A", "bench.scenarios.baseline", "worker", "-Q", QUEUE, "-c", str(concurrency), "-P", pool),
        *("-n", "noop@%h", "--without-gossip", "--without-mingle", "-l", "INFO"),
    ]
    worker = devprocs.Proc("worker-noop", argv, worker_env, ready_marker="ready.")
    try:
        # Sampled from the first publish: the worker's CPU for receiving and holding ETA tasks is part
        # of what each task costs.
        with MemorySampler([worker.pid]) as mem, app.producer_or_acquire() as producer:
            # Every task must be on the queue before the due moment, and apply_async costs about 1 ms
            # here (kombu's Redis transport builds a client per publish): time a few throwaway tasks
            # (another run id, so the worker drops them; their CPU is noise next to n) and push the due
            # moment out when needed.
            sample = min(n, 200)
            started = time.monotonic()
            for _ in range(sample):
                noop.apply_async(("calibration",), queue=QUEUE, producer=producer)
            per_task = (time.monotonic() - started) / sample
            lead_seconds = max(lead_seconds, 2.0 + 1.5 * per_task * n)
            due = datetime.now(UTC) + timedelta(seconds=lead_seconds)
            started = time.monotonic()
            for _ in range(n):
                noop.apply_async((run,), eta=due, queue=QUEUE, producer=producer)
            publish_seconds = time.monotonic() - started
            print(f"baseline: {n} ETA no-op tasks due at {due.isoformat()}", flush=True)
            deadline = time.monotonic() + lead_seconds + timeout
            times = _run_times(record_dir)
            while len(times) < n and time.monotonic() < deadline:
                if worker.popen.poll() is not None:
                    raise RuntimeError(f"the baseline worker exited:\n{worker.log()[-4000:]}")
                time.sleep(0.25)
                times = _run_times(record_dir)
            cpu = mem.cpu_seconds()
    finally:
        worker.stop()
        shutil.rmtree(record_dir, ignore_errors=True)
    due_ts = due.timestamp()
    lags = sorted(t - due_ts for t in times)
    span = lags[-1] if lags else float("nan")
    worker_cpu = sum(v for k, v in cpu.items() if k == "noop")
    return {
        "tasks": n,
        "all_ran": len(times) >= n,
        "ran": len(times),
        "lead_s": round(lead_seconds, 2),
        "published_in_s": round(publish_seconds, 2),
        # Publishing past the due moment would start the clock before the last task was even queued.
        "published_after_due": publish_seconds > lead_seconds,
        "due_to_last_run_s": span,
        "throughput_tasks_s": len(times) / span if span and span > 0 else None,
        "run_early": sum(1 for lag in lags if lag < 0),
        "lag_p50_s": _pct(lags, 0.5),
        "lag_p99_s": _pct(lags, 0.99),
        "worker_cpu_ms_per_task": round(1000 * worker_cpu / max(1, len(times)), 3),
        "concurrency": concurrency,
        "pool": pool,
    }


def _pct(values: list[float], q: float) -> float | None:
    return values[min(len(values) - 1, int(len(values) * q))] if values else None
