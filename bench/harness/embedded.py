"""The embedded run as a harness: ``./deploy/run-embedded.sh`` from this checkout in a fresh folder on free
ports (``EmbeddedRun``), messages sent to it at a steady rate (``Sender``), busy-looping processes beside
it (``hogs_start``) and what became of every message (``outcome``). The embedded soak
(bench/scenarios/embedded.py) and tests/integration/test_embedded_supervision.py drive it. No PostgreSQL
or broker needed: only HTTP to the run it started."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from datetime import datetime
from pathlib import Path

from bench.harness.devprocs import ROOT, free_port

FINAL = ("delivered", "undelivered", "failed", "cancelled", "expired")


def recipient(i: int) -> str:
    return f"+1415{5550000 + i}"


def sender(i: int) -> str:
    return f"+1628555{i:04d}"


class EmbeddedRun:
    """``./deploy/run-embedded.sh`` in its own session, in a fresh SMSGW_VAR_DIR, on free ports."""

    def __init__(self, var_dir: Path | None = None, env: dict[str, str] | None = None) -> None:
        self.var = var_dir or Path(tempfile.mkdtemp(prefix="smsgw-embedded-"))
        self.web_port, self.sandbox_port = free_port(), free_port()
        self.vonage_port, self.vonage_control_port = free_port(), free_port()
        self.env = {
            k: v
            for k, v in os.environ.items()
            # DJANGO_SETTINGS_MODULE too: a newcomer's shell has none, and the script must not need it.
            if k
            not in (
                "DATABASE_URL",
                "CELERY_BROKER_URL",
                "DJANGO_SECRET_KEY",
                "SMSGW_ENV",
                "DJANGO_SETTINGS_MODULE",
            )
        }
        self.env.update(
            SMSGW_VAR_DIR=str(self.var),
            SMSGW_WEB_PORT=str(self.web_port),
            SMSGW_SANDBOX_PORT=str(self.sandbox_port),
            SMSGW_VONAGE_SANDBOX_PORT=str(self.vonage_port),
            SMSGW_VONAGE_SANDBOX_CONTROL_PORT=str(self.vonage_control_port),
            **(env or {}),
        )
        self.log_path = self.var / "run.log"
        self.proc: subprocess.Popen | None = None
        self.key = ""

    @property
    def web(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def sandbox(self) -> str:
        return f"http://127.0.0.1:{self.sandbox_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self, timeout: float = 300) -> None:
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            ["./deploy/run-embedded.sh"],
            cwd=ROOT,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while b"Press Ctrl-C" not in self.log_path.read_bytes():
            if self.proc.poll() is not None:
                raise RuntimeError(f"the embedded run exited {self.proc.returncode}:\n{self.log()[-5000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the embedded run did not start in {timeout:g} s:\n{self.log()[-5000:]}")
            time.sleep(0.25)
        self.key = (self.var / "demo-api-key").read_text().strip()

    def senders_assign(self, senders: list[str]) -> None:
        """Give the demo tenant these From numbers (a tenant sends only from its own, docs/senders.md)."""
        code = (
            "from smsgw.models import Tenant; from smsgw.tenancy.senders import sender_assign; "
            "t = Tenant.objects.get(slug='demo'); "
            f"[sender_assign(tenant=t, sender=s) for s in {senders!r}]"
        )
        subprocess.run(
            [str(ROOT / ".venv/bin/python"), "manage.py", "shell", "-v", "0", "-c", code],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
        )

    def status(self) -> dict:
        """deploy/embedded.py's status file: the children's pids and restart counts."""
        return json.loads((self.var / "embedded.json").read_text())

    def restarts(self) -> dict[str, int]:
        return {name: c["restarts"] for name, c in self.status()["children"].items()}

    def request(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        *,
        idempotency_key: str = "",
        base: str = "",
        timeout: float = 30,
    ) -> tuple[int, dict]:
        headers = {"Content-Type": "application/json"}
        if self.key and not base:
            headers["Authorization"] = f"Bearer {self.key}"
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        data = json.dumps(body).encode() if body is not None else None
        url = (base or self.web) + path
        req = urllib.request.Request(url, method=method, data=data, headers=headers)  # noqa: S310 - http only
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - our own server
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def post_message(self, body: dict, key: str, deadline: float) -> dict:
        """POST until it is answered (a refused or timed-out request on a loaded machine is retried; the
        Idempotency-Key makes a retry return the message the first one made, never a second one)."""
        while True:
            try:
                status, answer = self.request("POST", "/v1/messages", body, idempotency_key=key)
            except OSError:
                status, answer = 0, {}
            if status in (200, 201):
                return answer
            if time.monotonic() > deadline:
                raise RuntimeError(f"POST /v1/messages not accepted: {status} {answer}")
            time.sleep(0.5)

    def messages(self) -> list[dict]:
        """Every message of the demo tenant, through the API's cursor pages."""
        out, cursor = [], ""
        while True:
            path = "/v1/messages?page_size=500" + (f"&cursor={cursor}" if cursor else "")
            status, page = self.request("GET", path, timeout=60)
            if status != 200:
                raise RuntimeError(f"GET {path}: {status} {page}")
            out.extend(page["results"])
            if not page.get("next"):
                return out
            cursor = urllib.parse.parse_qs(urllib.parse.urlsplit(page["next"]).query)["cursor"][0]

    def twilio_submissions(self) -> Counter:
        req = urllib.request.Request(self.sandbox + "/_sandbox/submissions?since=0")  # noqa: S310
        with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310
            rows = json.loads(resp.read())
        return Counter(row[3] for row in rows)

    def vonage_submissions(self) -> Counter:
        """Requests per recipient at the Vonage sandbox (parts of one request share its request id; the
        sandbox keeps Vonage's MSISDN, without the +)."""
        url = f"http://127.0.0.1:{self.vonage_control_port}/_sandbox/messages"
        with urllib.request.urlopen(url, timeout=60) as resp:
            parts = json.loads(resp.read())
        requests = {("+" + p["to"], p["request_id"]) for p in parts}
        return Counter(to for to, _ in requests)

    def stop(self, timeout: float = 30) -> float:
        """SIGTERM to the run's process group (as Ctrl-C in its terminal); seconds until it exited."""
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        started = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        elapsed = time.monotonic() - started
        self._log.close()
        return elapsed


def hogs_start(n: int) -> list[subprocess.Popen]:
    """``n`` processes that spin on a core each, as another tenant of the machine would."""
    return [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(n)
    ]


def hogs_stop(hogs: list[subprocess.Popen]) -> None:
    for hog in hogs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(hog.pid, signal.SIGKILL)
        hog.wait(10)


class Sender(threading.Thread):
    """POSTs ``rate`` messages a second for ``seconds`` (or until ``stop()``) on a fixed timetable (a late
    one is sent at once, not skipped), each to its own recipient."""

    def __init__(self, run: EmbeddedRun, rate: float, seconds: float, senders: int, first: int = 0) -> None:
        super().__init__(daemon=True)
        self.run_, self.rate, self.seconds, self.senders, self.first = run, rate, seconds, senders, first
        run.senders_assign([sender(i) for i in range(senders)])
        self.accepted: list[dict] = []
        self.post_seconds: list[float] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()

    def stop(self) -> None:
        """No message after the one being sent (its POST is answered first)."""
        self._stop.set()

    def run(self) -> None:
        try:
            start = time.monotonic()
            n = round(self.rate * self.seconds)
            for i in range(n):
                if self._stop.is_set():
                    return
                due = start + i / self.rate
                if (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)
                k = self.first + i
                t0 = time.monotonic()
                body = {"to": recipient(k), "from": sender(k % self.senders), "body": f"soak {k}"}
                answer = self.run_.post_message(body, f"soak-{k}", deadline=t0 + 120)
                self.post_seconds.append(time.monotonic() - t0)
                self.accepted.append({"id": answer["id"], "to": body["to"]})
        except BaseException as exc:  # reported by the caller
            self.error = exc


def _seconds(a: str | None, b: str | None) -> float | None:
    if not a or not b:
        return None
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def outcome(run: EmbeddedRun, accepted: list[dict], settle_seconds: float) -> dict:
    """Wait (up to ``settle_seconds``) for every accepted message to be final; then count."""
    ids = {a["id"] for a in accepted}
    deadline = time.monotonic() + settle_seconds
    while True:
        by_id = {m["id"]: m for m in run.messages() if m["id"] in ids}
        pending = [i for i in ids if by_id.get(i, {}).get("status") not in FINAL]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(2)
    # Submissions each recipient got, at both sandboxes: a route's standby leg (Vonage for a US number in
    # the demo routes) takes a message its first provider was proved never to have got
    # (delivery.sending.reconcile._absent), for example one a killed worker never sent.
    twilio, vonage = run.twilio_submissions(), run.vonage_submissions()
    submitted = twilio + vonage
    statuses = Counter(by_id.get(i, {}).get("status", "missing") for i in ids)
    lags = [
        lag for m in by_id.values() if (lag := _seconds(m["due_at"], m["timestamps"]["sent_at"])) is not None
    ]
    return {
        "accepted": len(ids),
        "statuses": dict(statuses),
        "lost": len(ids) - statuses.get("delivered", 0),
        "duplicated": sum(1 for a in accepted if submitted.get(a["to"], 0) > 1),
        "never_submitted": sum(1 for a in accepted if submitted.get(a["to"], 0) == 0),
        "through_standby": sum(1 for a in accepted if vonage.get(a["to"], 0) > 0),
        # What the API says of each message no sandbox got: its route and why it ended as it did.
        "never_submitted_messages": [
            {k: by_id.get(a["id"], {}).get(k) for k in ("id", "status", "route", "status_reason")}
            for a in accepted
            if submitted.get(a["to"], 0) == 0
        ],
        "lag_p50": percentile(lags, 50),
        "lag_p99": percentile(lags, 99),
        "lag_max": max(lags) if lags else float("nan"),
    }
