"""The fake provider's sandbox as a separate process (its kit's ``sandbox_process``)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from tests.fakeprovider.config import DEFAULT_SECRET, DEFAULT_TOKEN
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[3]
_LISTENING = re.compile(r"fakeprov sandbox listening on (http://\S+)")


class FakeSandboxProcess:
    MODULE = "tests.fakeprovider.sandbox"

    def __init__(
        self, *, token: str = DEFAULT_TOKEN, secret: str = DEFAULT_SECRET, start_timeout: float = 15.0
    ):
        self.token = token
        self.secret = secret
        self.start_timeout = start_timeout
        self.process: subprocess.Popen | None = None
        self.base_url = ""

    def start(self) -> FakeSandboxProcess:
        argv = [sys.executable, "-m", self.MODULE, "--port", "0", "--token", self.token]
        argv += ["--signing-secret", self.secret]
        self.process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline() if self.process.stdout else ""
        match = _LISTENING.search(line)
        if not match:
            self.stop()
            raise RuntimeError(f"the fake sandbox did not start: {line!r}")
        self.base_url = match.group(1)
        try:
            wait_for(lambda: self._get("/_sandbox/health"), self.start_timeout, "the fake sandbox's health")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> FakeSandboxProcess:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(self.base_url + path, timeout=10) as response:
            return json.loads(response.read())

    def messages(self) -> list[dict]:
        return self._get("/_sandbox/messages")

    def stats(self) -> dict:
        return self._get("/_sandbox/stats")
