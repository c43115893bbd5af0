"""Run a sandbox as a real separate process (tests, the benchmark, the embedded run): the base of each
provider's launcher (``delivery.providers.<name>.sandbox.process``), which names the module it runs, its
credential flags and the first line it prints.

    with ProviderSandboxProcess() as sandbox:  # a provider's subclass
        sandbox.config(latency_ms=50); sandbox.stats(); sandbox.message_info("<id>"); sandbox.reset()
        sandbox.inbound("+447700900123", "+15005550006", "STOP"); sandbox.inbound_log()

The process is started with ``--port 0`` and reports the port it bound in its first stdout line, so
there is no free-port race. With ``control_port`` (0: any free port) the control API is also served on
a port of its own, which stays up during outages (``config(outage="refuse")`` closes the API port):
every control call then goes there (``control_url``). ``unused_port`` hands out ports for the other
servers of a test. Must not import Django.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

REPO_ROOT = Path(__file__).resolve().parent.parent


_next_port: int | None = None


def unused_port() -> int:
    """A port nothing listens on (bound then released; nothing else is expected to take it).

    With SMSGW_TEST_PORTS=low-high (set per parallel test worker by tests/isolation.py) the port comes
    from that range, walked in order: two workers never pick the same port, and one process does not pick
    a port again until it has handed out the whole range, so a port picked for a server that has not bound
    it yet is not picked twice. Without it, the kernel picks an ephemeral port."""
    span = os.environ.get("SMSGW_TEST_PORTS", "")
    if not span:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
    low, high = (int(part) for part in span.split("-"))
    global _next_port
    for _ in range(high - low + 1):
        port = _next_port if _next_port is not None and low <= _next_port <= high else low
        _next_port = low if port >= high else port + 1
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken (a server of this worker, or a connection still in TIME_WAIT)
            return port
    raise RuntimeError(f"no free port in SMSGW_TEST_PORTS={span}")


class SandboxProcess:
    def __init__(
        self,
        *,
        extra_args: list[str] | None = None,
        start_timeout: float = 15.0,
        host: str = "127.0.0.1",
        command_prefix: list[str] | None = None,
        control_port: int | None = None,
        inbound_url: str | None = None,
    ) -> None:
        # inbound_url: where POST /_sandbox/inbound posts by default (the gateway's /inbound/<name>/);
        # also settable later with config(inbound_url=...)
        # command_prefix: e.g. ["ip", "netns", "exec", "ns1"] to run the provider on another network
        # host (a test partitions the link between the send workers and it).
        self.host = host
        self.command_prefix = list(command_prefix or [])
        self.extra_args = list(extra_args or [])
        if inbound_url is not None:
            self.extra_args += ["--inbound-url", inbound_url]
        self.start_timeout = start_timeout
        self.control_port = control_port  # as asked: None (no control listener), 0 (any port) or a port
        self.process: subprocess.Popen | None = None
        self.base_url = ""  # the provider's API (and the control API, unless there is a control listener)
        self.control_url = ""  # where the control API is called: the control listener, else base_url
        self.banner = ""  # the first stdout line
        self._stderr = None

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> SandboxProcess:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in __exit__
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        for name in self.PORT_ENV:
            env.pop(name, None)
        control = [] if self.control_port is None else ["--control-port", str(self.control_port)]
        self.process = subprocess.Popen(
            [
                *self.command_prefix,
                sys.executable,
                "-m",
                self.MODULE,
                "--host",
                self.host,
                "--port",
                "0",
                *self._credential_args(),
                *control,
                *self.extra_args,
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        line = self._read_first_line()  # the server prints exactly one line, when ready
        match = self.LISTENING.search(line)
        if not match:
            self._fail(f"sandbox did not start: {line!r}")
        self.banner = line.strip()
        self._read_banner(match)
        if self.control_port is not None and self.control_url == self.base_url:
            self._fail(f"sandbox started without its control listener: {line!r}")
        self._wait_healthy()
        return self

    # what a provider's sandbox overrides: the module it runs, its credential flags, the first line it
    # prints and what is read from it, the environment it must not inherit
    MODULE: str = ""
    LISTENING: re.Pattern[str] = re.compile(r"(?!)")
    PORT_ENV: tuple[str, ...] = ()

    def _credential_args(self) -> list[str]:
        return []

    def _read_banner(self, match: re.Match) -> None:
        self.base_url = match.group(1)
        self.control_url = match.group(2) or self.base_url

    def _urlopen_context(self) -> Any:
        """The SSL context for control calls over HTTPS (None: plain HTTP)."""
        return None

    def _read_first_line(self) -> str:
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout=self.start_timeout):
                return ""
        return self.process.stdout.readline()

    def _fail(self, message: str) -> None:
        self.stop()
        raise RuntimeError(f"{message}\n{self.stderr_text()}")

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                self._request("GET", "/_sandbox/health")
                return
            except (OSError, urllib.error.URLError):
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self._fail("sandbox not healthy")
                time.sleep(0.05)

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

    def stderr_text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    def __enter__(self) -> SandboxProcess:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    # -- control API --------------------------------------------------------------------------------
    def _request(self, method: str, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        url = self.control_url + path  # always http://host:port, read from the process
        request = urllib.request.Request(url, data=data, method=method)  # noqa: S310
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(  # noqa: S310
            request, timeout=10, context=self._urlopen_context()
        ) as response:
            return json.loads(response.read())

    def config(self, **changes: Any) -> dict:
        """POST the given keys (merged into the current config); returns the whole config. With no
        keys, just GET it."""
        if not changes:
            return self._request("GET", "/_sandbox/config")
        return self._request("POST", "/_sandbox/config", changes)

    def reset(self) -> None:
        self._request("POST", "/_sandbox/reset", {})

    def stats(self) -> dict:
        return self._request("GET", "/_sandbox/stats")

    def inbound(self, from_: str, to: str, body: str, **options: Any) -> dict:
        """``POST /_sandbox/inbound``: ``from_`` replies ``body`` to our number ``to``; ``options`` are
        the request's other keys (url, copies, burst, delay_ms, parts_order, ...). The 202 answer."""
        return self._request("POST", "/_sandbox/inbound", {"from": from_, "to": to, "body": body, **options})

    def inbound_log(self, webhook_id: str | None = None) -> list[dict]:
        """``GET /_sandbox/inbound``: every inbound webhook (or those of one id) with its deliveries."""
        query = "" if webhook_id is None else "?" + urlencode({"id": webhook_id})
        return self._request("GET", "/_sandbox/inbound" + query)["inbound"]

    def message_info(self, sid: str) -> dict:
        """The sandbox's internals for one message: the request it received (its callback URL, validity,
        ...), its sender, its assign / release / final instants and its timeline."""
        return self._request("GET", f"/_sandbox/messages/{sid}")
