"""Start the gateway's own processes (celery worker, beat) as real subprocesses, for the integration
tests and the benchmark. Each writes to a log file; SIGKILL reaches the whole process group."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sandbox.process import unused_port
from smsgw.runtime.queues import RECONCILE, ROUTED_QUEUES, SEND_BULK, SEND_TRANSACTIONAL

ROOT = Path(__file__).resolve().parents[2]  # the checkout (this file is bench/harness/devprocs.py)
BIN = Path(sys.executable).parent
ALL_QUEUES = ",".join(ROUTED_QUEUES)
# The queues whose tick polls for most of every second (config.settings.jobs: tick jobs that loop inside
# their interval), each holding a worker process while it does.
POLLING_QUEUES = frozenset({"sweep", "receipts", "inbound", "webhooks"})
SEND_QUEUES = ",".join((SEND_TRANSACTIONAL, SEND_BULK, RECONCILE))


def free_port() -> int:
    return unused_port()  # sandbox.process: honours a parallel test worker's own port range


class Proc:
    def __init__(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str],
        ready_marker: str | None = None,
        *,
        wait: bool = True,
    ):
        """``wait=False``: return once the process is started; ``ready()`` waits for ``ready_marker`` (so
        several processes start at once, then are waited for together)."""
        self.name = name
        self.ready_marker = ready_marker
        self._ready = False
        self.log_path = Path(tempfile.mkstemp(prefix=f"smsgw-{name}-", suffix=".log")[1])
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        # Own process group: SIGKILL reaches the celery parent and its pool children together.
        self.popen = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        if wait:
            self.ready()

    def ready(self, timeout: float = 60) -> None:
        """Wait until the log shows the ready marker (at once without one)."""
        if self.ready_marker and not self._ready:
            self.wait_for(self.ready_marker, timeout)
        self._ready = True

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, marker: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker in self.log():
                return
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.popen.returncode}:\n{self.log()[-4000:]}")
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} not ready after {timeout}s:\n{self.log()[-4000:]}")

    def kill9(self) -> None:
        os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10)

    def stop(self, timeout: float = 20) -> None:
        stop_all([self], timeout)

    def _terminate(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)

    def _finish(self, timeout: float) -> None:
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)
        self._log.close()


def stop_all(procs: list[Proc], timeout: float = 20) -> None:
    """SIGTERM to every process group at once, then wait for them together: the processes of one test (or
    one benchmark) stop in the time the slowest takes, not in the sum of their times. One still running
    after ``timeout`` is killed (SIGKILL)."""
    for proc in procs:
        proc._terminate()
    deadline = time.monotonic() + timeout
    for proc in procs:
        proc._finish(max(0.0, deadline - time.monotonic()))


def celery_worker(
    name: str,
    env: dict[str, str],
    *,
    queues: str = ALL_QUEUES,
    concurrency: int | None = None,
    pool: str = "prefork",
    wrap: tuple[str, ...] = (),
    wait: bool = True,
) -> Proc:
    """``wrap``: a command the worker runs under (e.g. ``nsenter --net=...``: on a network of its own).
    ``concurrency`` defaults to 2, or one more than the polling ticks it takes plus one: the sweep,
    receipts, inbound and webhooks ticks each keep a process for most of their second, and a tick that
    waits past its expiry (two intervals) is discarded. A worker on every queue with 4 processes had none
    left for the sends once the inbound tick came (sends drained in a minute instead of seconds)."""
    if concurrency is None:
        polling = len(set(queues.split(",")) & POLLING_QUEUES)
        concurrency = polling + 1 if polling >= 3 else 2
    return Proc(
        f"worker-{name}",
        [
            *wrap,
            str(BIN / "celery"),
            "-A",
            "config",
            "worker",
            "-Q",
            queues,
            "-c",
            str(concurrency),
            "-n",
            f"{name}@%h",
            "-P",
            pool,
            "--without-gossip",
            "--without-mingle",
            "-l",
            "INFO",
        ],
        env,
        ready_marker="ready.",
        wait=wait,
    )


def celery_beat(name: str, env: dict[str, str], *, wait: bool = True) -> Proc:
    schedule_dir = tempfile.mkdtemp(prefix=f"smsgw-beat-{name}-")
    return Proc(
        f"beat-{name}",
        [
            str(BIN / "celery"),
            "-A",
            "config",
            "beat",
            "-l",
            "INFO",
            "-S",
            "django_celery_beat.schedulers:DatabaseScheduler",
            "--pidfile",
            f"{schedule_dir}/beat.pid",
        ],
        env,
        ready_marker="beat: Starting",
        wait=wait,
    )


def gunicorn(
    env: dict[str, str], *, port: int, workers: int = 4, threads: int = 1, worker_class: str | None = None
) -> Proc:
    """The web server as production runs it (docs/deploy.md, "Production"). ``worker_class`` defaults to
    SMSGW_WEB_WORKER_CLASS, else gthread: unlike sync it keeps client connections alive, so a worker
    does not accept and close a connection per request (measured with ``python -m bench ingest``: about
    10% more requests/s than sync at the same worker count). The Proc records the class used."""
    worker_class = worker_class or env.get("SMSGW_WEB_WORKER_CLASS") or "gthread"
    proc = Proc(
        "web",
        [
            str(BIN / "gunicorn"),
            "config.wsgi",
            "--config",
            "python:smsgw.runtime.gunicorn_conf",  # limits and JSON error pages
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--threads",
            str(threads),
            "--worker-class",
            worker_class,
            "--no-control-socket",  # not one socket per host for every gunicorn (docs/deploy.md)
        ],
        env,
        ready_marker="Booting worker",
    )
    proc.worker_class = worker_class
    time.sleep(1.0)
    return proc


class RedisServer:
    """A private redis-server without persistence (tests and benchmarks of broker faults): a kill -9 and
    a start bring it back empty, as a crashed Redis without AOF or RDB comes back. Never the shared one."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="smsgw-redis-")
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 20) -> None:
        import redis

        self.proc = subprocess.Popen(
            [shutil.which("redis-server") or "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:  # until it answers (a deadline, not a fixed wait)
            try:
                redis.Redis.from_url(self.url, socket_timeout=1).ping()
                return
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.05)

    def kill9(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill9()
        shutil.rmtree(self.dir, ignore_errors=True)
