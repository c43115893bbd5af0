"""The tenant API through a real gunicorn whose database link the test cuts (a TCP proxy in front of
PostgreSQL, tests.integration.db_proxy): every POST /v1/messages during the outage is a 503 with
Retry-After in the header and the error envelope, nothing is stored, the log has one rate-limited line and
no traceback; once the database is back the same request is accepted. Then SIGTERM stops gunicorn within
30 s, and it never opened a control socket (tests/smsgw/runtime/test_gunicorn_commands.py)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest
from django.db import connection

from scheduling.models import Message
from tests.factories import RECIPIENT, tenant_with_key
from tests.harness import start_web
from tests.integration.db_proxy import DatabaseProxy
from tests.integration.test_process_stop import STOP_DEADLINE_S, sigterm_group_and_time
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

OUTAGE_REQUESTS = 25
RETRY_AFTER_S = 4


def _post(base: str, key: str, body: dict, idempotency_key: str) -> tuple[int, dict, dict]:
    req = urllib.request.Request(
        f"{base}/v1/messages",
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "Idempotency-Key": idempotency_key,
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read() or b"null")


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_post_message_during_a_database_outage_is_503_with_retry_after_and_stores_nothing(pipeline, tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip("the outage is a TCP proxy in front of PostgreSQL")
    db = connection.settings_dict
    proxy = DatabaseProxy((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)))
    web_db = f"postgres://{db['USER'] or 'postgres'}@127.0.0.1:{proxy.port}/{db['NAME']}"
    home = tmp_path / "home"
    home.mkdir()
    web_env = {
        "DATABASE_URL": web_db,
        "SMSGW_DB_RETRY_AFTER_SECONDS": str(RETRY_AFTER_S),
        # One window for the whole outage, however slow this machine is: exactly one line is written.
        "SMSGW_LOG_REPEAT_WINDOW": "600",
        "HOME": str(home),  # where gunicorn's default control socket would go (~/.gunicorn)
        "XDG_RUNTIME_DIR": "",
    }
    # One gunicorn worker: the repeat limit is per process, and the test counts its lines.
    base = start_web(pipeline, web_only=web_env, workers=1)
    web = pipeline.procs[-1]
    _, key = tenant_with_key("acme")
    body = {"to": RECIPIENT, "body": "during the outage"}
    try:
        wait_for(lambda: _get(f"{base}/healthz") == 200, 60, "gunicorn to answer")
        # Before the outage: accepted (the web worker now holds a connection that the cut will break).
        status, _, warm = _post(base, key, {"to": RECIPIENT, "body": "before"}, "before")
        assert status == 201, warm
        log_start = len(web.log())

        proxy.down()
        answers = [_post(base, key, body, "during") for _ in range(OUTAGE_REQUESTS)]
        assert _get(f"{base}/healthz") == 200  # liveness needs no database
        outage_log = web.log()[log_start:]
        assert _get(f"{base}/readyz") == 503  # (logged by django.request as every 5xx it answers)
        connection.close()
        # Nothing of the outage's requests was stored (counted on the test's own, direct link).
        assert list(Message.objects.values_list("public_id", flat=True)) == [warm["id"]]

        proxy.up()
        accepted = wait_for(
            lambda: (answer := _post(base, key, body, "during"))[0] == 201 and answer,
            60,
            "the same POST to be accepted once the database is back",
        )
        took = sigterm_group_and_time(web)
    finally:
        proxy.close()

    for status, headers, answer in answers:
        assert status == 503, answer
        assert headers["Retry-After"] == str(RETRY_AFTER_S)
        # Problem details (RFC 9457) with the earlier envelope inside (docs/api.md, "Errors").
        assert answer["status"] == 503 and answer["code"] == "database_unavailable", answer
        assert answer["type"].endswith("#database_unavailable") and answer["request_id"], answer
        assert answer["error"] == {
            "code": "database_unavailable",
            "message": f"The database is unavailable; retry in {RETRY_AFTER_S} s.",
            "retry_after": RETRY_AFTER_S,
        }
    assert "Traceback" not in outage_log, outage_log[-4000:]
    assert not re.search(r"\b(ERROR|CRITICAL)\b", outage_log), outage_log[-4000:]
    assert " 500" not in outage_log and "Internal Server Error" not in outage_log, outage_log[-4000:]
    assert len(re.findall(r"database unavailable \(\w+\): answering 503", outage_log)) == 1, outage_log
    assert Message.objects.filter(public_id=accepted[2]["id"]).exists()
    assert Message.objects.count() == 2
    print(f"gunicorn stop right after a database outage: {took:.2f} s")
    assert took < STOP_DEADLINE_S
    assert not (home / ".gunicorn").exists(), "gunicorn opened its per-user control socket"
