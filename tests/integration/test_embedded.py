"""The README's first command, run as a newcomer runs it: SQLite, the filesystem transport, the sandbox,
gunicorn, a real celery worker and beat. One message goes through over HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.processes import ROOT, free_port
from tests.waiting import wait_for

# The embedded mode runs in its own processes on SQLite and the filesystem broker: the SQLite half's.
pytestmark = [pytest.mark.integration, pytest.mark.embedded]


def _http(
    method: str,
    url: str,
    key: str = "",
    body: dict | None = None,
    *,
    deadline: float | None = None,
    idempotency_key: str = "embedded-smoke-1",
) -> tuple[int, dict]:
    """One request; a connection error or a timeout (a loaded machine: SQLite writers queue on the
    busy timeout) is retried until the deadline. The POST carries an Idempotency-Key, so a retried
    create returns the same message instead of a second one."""
    deadline = deadline or time.monotonic() + 60
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    if method == "POST":
        headers["Idempotency-Key"] = idempotency_key

    def attempt() -> tuple[int, dict]:
        req = urllib.request.Request(
            url, method=method, data=json.dumps(body).encode() if body else None, headers=headers
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")
        # any other OSError (refused, reset, timed out: the server is still busy) is retried

    return wait_for(attempt, max(0.0, deadline - time.monotonic()), f"{method} {url}", interval=0.5)


# The script's documented routes: a US number through Twilio, a UK one through Vonage.
MESSAGES = {"twilio": "+14155550123", "vonage": "+447400123456"}
ROUTES = {"twilio": "settings:us-twilio", "vonage": "settings:gb-vonage"}


def test_embedded_mode_sends_one_message_through_real_processes_and_gets_its_receipt():
    """Both sandboxes run beside the gateway; the script's documented routes send a US number through
    Twilio and a UK one through Vonage (its sandbox: HTTPS with the CA file the script writes to the var
    dir), and each message is counted there, by its own provider only. (One run for both: each used to
    start a run of its own.)"""
    var = Path(tempfile.mkdtemp(prefix="smsgw-embedded-"))
    web, sandbox, vonage, vonage_control = free_port(), free_port(), free_port(), free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        # A newcomer's shell: no DJANGO_SETTINGS_MODULE either (pytest-django sets one in this process).
        if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SECRET_KEY", "DJANGO_SETTINGS_MODULE")
    }
    env.update(SMSGW_VAR_DIR=str(var), SMSGW_WEB_PORT=str(web), SMSGW_SANDBOX_PORT=str(sandbox))
    env.update(SMSGW_VONAGE_SANDBOX_PORT=str(vonage), SMSGW_VONAGE_SANDBOX_CONTROL_PORT=str(vonage_control))
    for name in [k for k in env if k.startswith("VONAGE_")] + ["SMSGW_ROUTES"]:
        env.pop(name, None)  # the script's own defaults
    env.pop("SMSGW_PROVIDER", None)
    log = open(var / "run.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        ["./deploy/run-embedded.sh"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        key_file = var / "demo-api-key"

        def ready() -> bool:
            assert proc.poll() is None, (var / "run.log").read_text()
            return b"Press Ctrl-C" in (var / "run.log").read_bytes()

        wait_for(ready, 240, "the embedded gateway to start", interval=0.5)
        key = key_file.read_text().strip()
        assert key.startswith("sk_")
        created = {}
        for provider, to in MESSAGES.items():
            status, created[provider] = _http(
                "POST",
                f"http://127.0.0.1:{web}/v1/messages",
                key,
                {"to": to, "body": "embedded smoke"},
                idempotency_key=f"embedded-smoke-{provider}",
            )
            assert status == 201, created[provider]
            assert created[provider]["route"]["legs"][0]["provider"] == provider, created[provider]["route"]
            assert created[provider]["route"]["name"] == ROUTES[provider]
        for provider in MESSAGES:
            seen = []

            def delivered(message_id=created[provider]["id"], seen=seen) -> bool:
                _, msg = _http(
                    "GET", f"http://127.0.0.1:{web}/v1/messages/{message_id}", key, deadline=deadline
                )
                if not seen or seen[-1] != msg["status"]:
                    seen.append(msg["status"])
                return (
                    msg["status"] == "delivered"
                )  # the sandbox's signed callbacks reach the receipt endpoint

            try:
                wait_for(delivered, max(0.0, deadline - time.monotonic()), "delivered", interval=0.2)
            except TimeoutError as exc:
                raise AssertionError(((var / "run.log").read_text()[-5000:], provider, seen)) from exc
            _, events = _http(
                "GET", f"http://127.0.0.1:{web}/v1/messages/{created[provider]['id']}/events", key
            )
            changes = [e["to_status"] for e in events["events"] if e["from_status"] != e["to_status"]]
            assert changes == ["queued", "sending", "sent", "delivered"], (provider, events)
            assert events["events"][0]["kind"] == "created"
        # Each provider got its own message once, and not the other's: the one Vonage holds is the UK one.
        _, stats = _http("GET", f"http://127.0.0.1:{sandbox}/_sandbox/stats")
        _, vonage_stats = _http("GET", f"http://127.0.0.1:{vonage_control}/_sandbox/stats")
        assert (stats["submissions"], vonage_stats["submissions"]) == (1, 1)
        _, parts = _http("GET", f"http://127.0.0.1:{vonage_control}/_sandbox/messages")
        (part,) = parts
        assert part["to"] == MESSAGES["vonage"].removeprefix("+") and part["from"] == "SMSGW"
        assert part["client-ref"].startswith(created["vonage"]["id"].removeprefix("msg_"))
        assert (var / "vonage-sandbox-ca.pem").read_text().startswith("-----BEGIN CERTIFICATE-----")
        # The Twilio-compatible API with the official SDK, as the README shows it: the demo account
        # SID from the var dir, the API key as the auth token, only the base URL changed.
        from twilio.rest import Client

        account_sid = (var / "demo-account-sid").read_text().strip()
        assert account_sid.startswith("AC") and len(account_sid) == 34
        client = Client(account_sid, key)
        client.api.base_url = f"http://127.0.0.1:{web}"
        sdk = client.messages.create(to=MESSAGES["twilio"], from_="+14155550100", body="embedded sdk smoke")
        assert sdk.status == "queued" and sdk.sid.startswith("SM")
        wait_for(
            lambda: client.messages(sdk.sid).fetch().status == "delivered",
            max(0.0, deadline - time.monotonic()),
            "the SDK's message delivered",
            interval=0.2,
        )
        _replies_arrive(web, key, {"twilio": sandbox, "vonage": vonage_control}, deadline)
        _readme_quick_start_runs(var, {8000: web, 8081: sandbox, 8083: vonage_control}, deadline)
        # The API reference as a browser loads it from gunicorn with DEBUG off: the page, then each
        # script it names, all from this server.
        with urllib.request.urlopen(f"http://127.0.0.1:{web}/v1/docs", timeout=30) as resp:
            page = resp.read().decode()
        scripts = re.findall(r'<script src="([^"]+)"', page)
        assert scripts and all(src.startswith("/v1/docs/assets/") for src in scripts), page
        for src in scripts:
            with urllib.request.urlopen(f"http://127.0.0.1:{web}{src}", timeout=30) as resp:
                assert resp.status == 200 and len(resp.read()) > 100_000, src
        # The admin's login page and every stylesheet and script it links, served by gunicorn with
        # DEBUG off (WhiteNoise), so the console renders styled.
        with urllib.request.urlopen(f"http://127.0.0.1:{web}/admin/login/", timeout=30) as resp:
            page = resp.read().decode()
        assets = re.findall(r'(?:href|src)="(/static/[^"]+)"', page)
        assert any(a.endswith(".css") for a in assets), page
        for src in assets:
            with urllib.request.urlopen(f"http://127.0.0.1:{web}{src}", timeout=30) as resp:
                assert resp.status == 200 and resp.read(), src
        # Stopped as a terminal's Ctrl-C or a process manager does: SIGTERM to the script's whole process
        # group. Every process it started (pool children included, whatever their group) is gone within
        # 30 s; the worker drains instead of hanging in its children's exit.
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        # script, two sandboxes, gunicorn x3, worker x5, beat
        assert len(tree) >= 9, [p.cmdline() for p in tree]
        os.killpg(proc.pid, signal.SIGTERM)
        _, alive = psutil.wait_procs(tree, timeout=30)
        assert not alive, [(p.pid, p.cmdline()) for p in alive]
    finally:
        with contextlib.suppress(ProcessLookupError):  # already stopped above, unless a check failed first
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def readme_quick_start(var: Path, ports: dict[int, int]) -> str:
    """The README's "Try it" section as one POSIX shell script: its ```sh blocks in order, as written, but
    for the embedded run's ports and var folder (a test's own)."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Try it (embedded mode)")
    section = readme[start : readme.index("\n## ", start + 1)]
    script = "\n".join(re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL))
    for documented, used in ports.items():
        script = script.replace(f"127.0.0.1:{documented}", f"127.0.0.1:{used}")
    return script.replace(".var/", f"{var}/")


def _readme_quick_start_runs(var: Path, ports: dict[int, int], deadline: float) -> None:
    """Every command of the README's quick start, run by a POSIX shell (dash: no bash-only syntax, as on
    macOS's zsh) from the checkout, prints what the README shows: each message delivered, the scheduled
    one first scheduled, the UK one through Vonage, the batch's three answers, the reply and the STOP
    processed, the Twilio SDK's two messages."""
    done = subprocess.run(
        ["sh", "-e", "-c", readme_quick_start(var, ports)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=max(60.0, deadline - time.monotonic()),
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    delivered = [line for line in lines if re.fullmatch(r"msg_[0-9a-f]{24} delivered", line)]
    assert len(delivered) == 3, lines  # now, later, the UK one
    assert any(re.fullmatch(r"msg_[0-9a-f]{24} scheduled", line) for line in lines), lines
    assert any(re.fullmatch(r"\S+ in New York is due at \S+Z", line) for line in lines), lines
    assert lines.count("vonage") == 1 and "settings:gb-vonage" in lines, lines
    assert [line.split()[0] for line in lines if re.match(r"(201|400) ", line)] == ["201", "201", "400"]
    assert delivered[0].split()[0] in lines  # the reply's in_reply_to: the first message
    assert "inbound received 'Yes, see you then'" in lines and "opt_out" in lines, lines
    assert any(re.fullmatch(r"SM[0-9a-f]{32} queued", line) for line in lines), lines
    assert any(re.fullmatch(r"SM[0-9a-f]{32} scheduled canceled", line) for line in lines), lines


def _replies_arrive(web: int, key: str, controls: dict[str, int], deadline: float) -> None:
    """A handset's reply through each sandbox: it posts its incoming-message webhook to the gateway's
    /inbound/<provider>/ (the kit's --inbound-url), signed, the gateway takes it, and the reply is in
    /v1/inbound, as the README shows it."""
    for provider, control in controls.items():
        status, posted = _http(
            "POST",
            f"http://127.0.0.1:{control}/_sandbox/inbound",
            body={"from": MESSAGES[provider], "to": "+14155550100", "body": f"HELP {provider}"},
        )
        assert status == 202 and posted["url"] == f"http://127.0.0.1:{web}/inbound/{provider}/", posted

        def answered(control=control, webhook_id=posted["ids"][0]) -> list:
            _, log = _http("GET", f"http://127.0.0.1:{control}/_sandbox/inbound?id={webhook_id}")
            attempts = [a for d in log["inbound"][0]["deliveries"] for a in d["attempts"]]
            return [a["status"] for a in attempts] if attempts[-1]["result"] != "pending" else []

        answers = wait_for(answered, max(0.0, deadline - time.monotonic()), "the inbound answered")
        assert answers == [200], (provider, answers)

    def replies() -> list:
        _, page = _http("GET", f"http://127.0.0.1:{web}/v1/inbound", key)
        return sorted(r["body"] for r in page["results"]) if len(page["results"]) == 2 else []

    assert wait_for(replies, max(0.0, deadline - time.monotonic()), "the replies in /v1/inbound") == [
        "HELP twilio",
        "HELP vonage",
    ]
