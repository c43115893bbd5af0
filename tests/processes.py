"""Real processes for integration tests: celery workers and beat, started as the README starts them,
pointed at the test database and the test broker. Each writes its log to a file the test can show."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
ALL_QUEUES = "sweep,send.transactional,send.bulk,reconcile"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def database_url() -> str:
    """The URL of the database this test run uses (pytest-django's test database)."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    return f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def process_env(**overrides: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url(),
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        DJANGO_SECRET_KEY=settings.SECRET_KEY,
        PYTHONUNBUFFERED="1",
    )
    env.update({k: str(v) for k, v in overrides.items()})
    return env


class Proc:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], ready_marker: str | None = None):
        self.name = name
        self.log_path = Path(tempfile.mkstemp(prefix=f"smsgw-{name}-", suffix=".log")[1])
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        # Own process group: SIGKILL reaches the celery parent and its pool children together.
        self.popen = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        if ready_marker:
            self.wait_for(ready_marker)

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
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)
            except ProcessLookupError:
                pass
        self._log.close()


def celery_worker(name: str, env: dict[str, str], *, queues: str = ALL_QUEUES, concurrency: int = 2) -> Proc:
    return Proc(
        f"worker-{name}",
        [str(BIN / "celery"), "-A", "smsgw", "worker", "-Q", queues, "-c", str(concurrency), "-n", f"{name}@%h",
         "--without-gossip", "--without-mingle", "-l", "INFO"],
        env, ready_marker="ready.",
    )


def celery_beat(name: str, env: dict[str, str]) -> Proc:
    schedule_dir = tempfile.mkdtemp(prefix=f"smsgw-beat-{name}-")
    return Proc(
        f"beat-{name}",
        [str(BIN / "celery"), "-A", "smsgw", "beat", "-l", "INFO", "-S",
         "django_celery_beat.schedulers:DatabaseScheduler", "--pidfile", f"{schedule_dir}/beat.pid"],
        env, ready_marker="beat: Starting",
    )


def broker_purge() -> None:
    """Empty the test broker so one test's leftovers never feed the next."""
    url = settings.CELERY_BROKER_URL
    if url.startswith("redis"):
        import redis

        redis.Redis.from_url(url).flushdb()
    else:
        from smsgw.celery import app

        with app.connection_for_write() as conn:
            for queue in ALL_QUEUES.split(","):
                try:
                    conn.default_channel.queue_purge(queue)
                except Exception:  # noqa: S110 - a queue that does not exist yet has nothing to purge
                    pass
