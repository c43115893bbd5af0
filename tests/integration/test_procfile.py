"""deploy/Procfile run by honcho, as a process manager would: the whole stack (gunicorn, one worker per
queue group, beat) delivers a message end to end, and SIGTERM to its process group, as systemd sends it,
stops every process with no message left in `sending` without an attempt and no callback refused. Started
again, the stack finishes what the stop interrupted: every message delivered, each submitted once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from pathlib import Path

import psutil
import pytest

from bench.harness.devprocs import BIN
from delivery.models import Attempt
from scheduling.models import Message, Status
from tests import processes
from tests.factories import recipient, tenant_with_key
from tests.waiting import wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
STOP_DEADLINE_S = 30


def _post(base: str, key: str, body: dict) -> dict:
    req = urllib.request.Request(
        f"{base}/v1/messages",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _start(env: dict, log_path: Path) -> tuple[subprocess.Popen, object]:
    log = log_path.open("w")
    stack = subprocess.Popen(
        [str(BIN / "honcho"), "start", "-f", "deploy/Procfile", "-d", str(ROOT), "--no-colour"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return stack, log


def _kill_leftovers(stack: subprocess.Popen) -> None:
    for p in psutil.Process().children(recursive=True):
        if p.pid == stack.pid or stack.pid in [a.pid for a in p.parents()]:
            p.kill()


def test_the_procfile_stack_delivers_and_stops_on_sigterm_to_its_group(pipeline, tmp_path):
    _, key = tenant_with_key("procfile")
    port = processes.free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **pipeline.env,
        "SMSGW_WEB_PORT": str(port),
        "SMSGW_PUBLIC_BASE_URL": base,
        "SMSGW_VAR_DIR": str(tmp_path),
    }
    stack, log = _start(env, tmp_path / "honcho.log")
    pgid = stack.pid
    try:
        wait_for(lambda: urllib.request.urlopen(f"{base}/healthz", timeout=2).status == 200, 90, "web up")
        first = _post(base, key, {"to": recipient(1), "body": "procfile hello"})
        wait_for(
            lambda: Message.objects.get(public_id=first["id"]).status == Status.DELIVERED,
            90,
            "the first message delivered (send worker, sandbox, signed callback, receipts worker)",
        )
        # A burst in flight when the stop comes.
        ids = [_post(base, key, {"to": recipient(100 + i), "body": f"burst {i}"})["id"] for i in range(40)]
        wait_for(lambda: len(pipeline.sandbox.list_messages()) > 5, 60, "the burst reaching the provider")
        tree = [psutil.Process(stack.pid), *psutil.Process(stack.pid).children(recursive=True)]
        os.killpg(pgid, signal.SIGTERM)
        # Every process of the stack (pool children included, whatever their group) is gone in time.
        _, alive = psutil.wait_procs(tree, timeout=STOP_DEADLINE_S)
        assert not alive, [(p.pid, p.cmdline()) for p in alive]
    finally:
        _kill_leftovers(stack)
        log.close()
    text = (tmp_path / "honcho.log").read_text()
    # Every message's state after the stop: nothing is in `sending` without an attempt row (a stop never
    # leaves a message the reconciler cannot account for); each accepted submission was recorded once.
    msgs = list(Message.objects.filter(public_id__in=[first["id"], *ids]))
    assert len(msgs) == 41
    for m in msgs:
        assert m.status in (Status.QUEUED, Status.SCHEDULED, Status.SENDING, Status.SENT, Status.DELIVERED), (
            m.public_id,
            m.status,
        )
        if m.status == Status.SENDING:
            assert Attempt.objects.filter(message=m).exists(), m.public_id
    by_to = pipeline.submissions_by_recipient()
    assert max(by_to.values()) == 1, by_to
    assert all(Attempt.objects.filter(message=m).exists() for m in msgs if m.to in by_to)
    stats = pipeline.sandbox.stats()
    # Callbacks sent after the web processes stopped find no connection (ct); none was ever refused by
    # a stopping web process (4xx/5xx) or left hanging (rt).
    results = stats["callback_results"]
    assert results.get("ok", 0) >= 2, results  # the first message's sent + delivered, at least
    assert set(results) <= {"ok", "ct"}, results
    # The workers drained: no task was cut off (no WorkerLostError), nothing raised.
    assert "Traceback" not in text and "WorkerLostError" not in text, text[-5000:]

    # Started again (callbacks lost while the web was down are looked up at the provider after 1 s),
    # the stack finishes the burst: every one of the 41 messages delivered, each submitted exactly once.
    env = {**env, "SMSGW_STATUS_LOOKUP_AFTER_SECONDS": "1", "SMSGW_STATUS_LOOKUP_INTERVAL": "1"}
    stack, log = _start(env, tmp_path / "honcho-again.log")
    try:
        pipeline.wait_until(
            lambda: (
                Message.objects.filter(public_id__in=[first["id"], *ids], status=Status.DELIVERED).count()
                == 41
            ),
            120,
            "every message delivered after the restart",
        )
        os.killpg(stack.pid, signal.SIGTERM)
        stack.wait(timeout=STOP_DEADLINE_S)
    finally:
        _kill_leftovers(stack)
        log.close()
    by_to = pipeline.submissions_by_recipient()
    assert sorted(by_to) == sorted(m.to for m in msgs)
    assert set(by_to.values()) == {1}, by_to
