"""Clients generated from the schema work against a live server: a Python client (openapi-python-client,
a dev dependency) and a TypeScript one (@hey-api/openapi-ts with its fetch client, compiled with tsc and run
by Node; pinned by tests/clients/ts/package-lock.json). Each is generated from the schema (what
``manage.py spectacular`` writes and ``GET /v1/openapi.json`` serves) into a temporary folder, as
docs/api.md ("Generated clients") tells a user to; no generated code is kept in the repository. Then a
program written against the operationIds (tests/clients/python/walk.py, tests/clients/ts/walk.ts) sends a
message now, schedules one at a local time and cancels it, waits for the first to be delivered through the
sandbox, lists both and reads the first one's timeline.

One live server (gunicorn, a worker, beat, the sandbox) serves both programs, which run at once: one test,
not two sharing a module-scoped server, since the parallel run (--dist load) would give each its own
worker and so its own server. The TypeScript half is skipped, saying why, where Node or its packages
(``npm ci --prefix tests/clients/ts``, run by deploy/test.sh) are missing; the Python half is asserted
first either way."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.utils import timezone

from bench.harness.devprocs import BIN
from tests.clients.python.walk import walk
from tests.factories import recipient, tenant_with_key
from tests.harness import start_web

CLIENTS = Path(__file__).resolve().parents[1] / "clients"
TS_DIR = CLIENTS / "ts"
NODE = shutil.which("node")
ZONE = "America/New_York"
DELIVERY_SECONDS = 60
# The moves on the timeline of a message sent now and delivered, in order: accepted, handed to a send
# worker, submitted, handed over, delivered. The sandbox's `sent` receipt moves nothing (the message is
# already sent, or delivered when both receipts are applied in one batch): a `receipt` note wherever it lands.
DELIVERED_MOVES = ["created", "queued", "attempt_started", "sent", "delivered"]

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _typescript_missing() -> str | None:
    if NODE is None:
        return "node is not installed: the generated TypeScript client needs Node.js 20.19 or later"
    if not (TS_DIR / "node_modules" / "@hey-api" / "openapi-ts").is_dir():
        return "the TypeScript generator is not installed: run npm ci --prefix tests/clients/ts"
    return None


def _schema(into: Path) -> Path:
    """The schema as ``manage.py spectacular`` writes it, made while the server's processes start."""
    path = into / "openapi.json"
    call_command("spectacular", "--format", "openapi-json", "--file", str(path))
    return path


def _run(args: list[str], cwd: Path) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{args[0]} failed ({done.returncode}):\n{done.stderr}\n{done.stdout}"
    return done.stdout + done.stderr


def _generate_python(schema: Path, into: Path) -> subprocess.Popen:
    """openapi-python-client making the package ``smsgw_client`` in ``into`` (started, not waited for)."""
    config = CLIENTS / "python" / "config.yaml"
    args = ["generate", "--path", str(schema), "--output-path", str(into / "smsgw_client"), "--meta", "none"]
    return subprocess.Popen(
        [str(BIN / "openapi-python-client"), *args, "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _build_typescript(schema: Path, into: Path) -> Path:
    """The client generated into ``into``/client beside a copy of walk.ts, compiled; returns walk.js."""
    into.mkdir()
    for name in ("walk.ts", "tsconfig.json"):
        shutil.copy(TS_DIR / name, into / name)
    tools = TS_DIR / "node_modules" / ".bin"
    _run([str(tools / "openapi-ts"), "-i", str(schema), "-o", "client", "-c", "@hey-api/client-fetch"], into)
    _run([str(tools / "tsc"), "-p", "."], into)
    return into / "out" / "walk.js"


def _generate(into: Path, typescript: bool) -> Path | None:
    """Both clients from one schema; walk.js when TypeScript is there."""
    schema = _schema(into)
    python = _generate_python(schema, into)
    walk_js = _build_typescript(schema, into / "ts") if typescript else None
    said = python.communicate(timeout=120)[0]
    assert python.returncode == 0, said
    # A part of the schema the generator cannot read would be left out of the client with a warning.
    assert "Warning" not in said, said
    return walk_js


def _walk_python(into: Path, base: str, key: str, **kw) -> dict:
    sys.path.insert(0, str(into))
    try:
        return walk(base, key, **kw)
    finally:
        sys.path.remove(str(into))
        for name in [m for m in sys.modules if m == "smsgw_client" or m.startswith("smsgw_client.")]:
            del sys.modules[name]


def _local_time_later(hours: int = 2) -> tuple[str, datetime]:
    """A wall time in ZONE a few hours ahead, without an offset (so read in ``timezone``), and its instant."""
    wall = (timezone.now().astimezone(ZoneInfo(ZONE)) + timedelta(hours=hours)).replace(microsecond=0)
    wall = wall.replace(tzinfo=None)
    return wall.isoformat(), wall.replace(tzinfo=ZoneInfo(ZONE))


def _check(seen: dict, *, now_to: str, due: datetime, lang: str) -> None:
    sent, scheduled = seen["sent"], seen["scheduled"]
    # A message sent now is born scheduled, due at once; the sweep queues it.
    assert sent["to"] == now_to and sent["status"] == "scheduled", (lang, seen)
    assert scheduled["status"] == "scheduled", (lang, seen)
    assert datetime.fromisoformat(scheduled["due_at"]) == due, (lang, seen)
    assert seen["canceled"] == {"id": scheduled["id"], "status": "cancelled"}, (lang, seen)
    assert seen["fetched"] == {"id": scheduled["id"], "status": "cancelled"}, (lang, seen)
    final = seen["final"]
    assert final["id"] == sent["id"] and final["status"] == "delivered", (lang, seen)
    assert final["provider_message_id"], (lang, seen)
    # The tenant's own two messages, newest first.
    assert seen["listed"] == [
        {"id": scheduled["id"], "status": "cancelled"},
        {"id": sent["id"], "status": "delivered"},
    ], (lang, seen)
    timeline = seen["timeline"]
    assert timeline["message"] == sent["id"], (lang, seen)
    assert [kind for kind in timeline["kinds"] if kind != "receipt"] == DELIVERED_MOVES, (lang, seen)


def test_generated_python_and_typescript_clients_send_schedule_cancel_list_and_read_a_timeline(
    pipeline, tmp_path
):
    # A tenant each, so each program's list holds its own two messages.
    _, py_key = tenant_with_key("py")
    _, ts_key = tenant_with_key("ts")
    base = start_web(pipeline)
    pipeline.worker()
    pipeline.beat()
    typescript_missing = _typescript_missing()
    walk_js = _generate(tmp_path, typescript=not typescript_missing)
    send_at, due = _local_time_later()
    pipeline.ready()

    ts_walk = None
    if walk_js is not None:
        args = [base, ts_key, recipient(2), recipient(3), send_at, ZONE, str(DELIVERY_SECONDS)]
        ts_walk = subprocess.Popen(
            [str(NODE), str(walk_js), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    try:
        py_seen = _walk_python(
            tmp_path,
            base,
            py_key,
            now_to=recipient(0),
            later_to=recipient(1),
            send_at=send_at,
            timezone=ZONE,
            deadline=DELIVERY_SECONDS,
        )
        _check(py_seen, now_to=recipient(0), due=due, lang="python")
        if ts_walk is None:
            assert pipeline.submissions_by_recipient() == Counter({recipient(0): 1})
            pytest.skip(f"the Python client passed; the TypeScript one did not run: {typescript_missing}")
        out, err = ts_walk.communicate(timeout=DELIVERY_SECONDS + 30)
    finally:
        if ts_walk is not None and ts_walk.poll() is None:
            ts_walk.kill()
            ts_walk.communicate()
    assert ts_walk.returncode == 0, f"walk.js failed ({ts_walk.returncode}):\n{err}\n{out}"
    _check(json.loads(out), now_to=recipient(2), due=due, lang="typescript")
    # Each message sent now reached the provider once; the cancelled ones never did.
    assert pipeline.submissions_by_recipient() == Counter({recipient(0): 1, recipient(2): 1})
