"""A private redis-server for broker-fault tests: no persistence, so a kill -9 and a start bring it back
empty, as a crashed Redis without AOF or RDB comes back."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time

from tests import processes


class RedisServer:
    """A Redis of the test's own, without persistence, that it can kill -9 and start again empty."""

    def __init__(self) -> None:
        self.port = processes.free_port()
        self.dir = tempfile.mkdtemp(prefix="smsgw-redis-")
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                shutil.which("redis-server") or "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        deadline = time.monotonic() + 20
        while True:
            try:
                redis.Redis.from_url(self.url, socket_timeout=1).ping()
                return
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill9()
        shutil.rmtree(self.dir, ignore_errors=True)
