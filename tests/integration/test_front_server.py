"""The web role's front server as production runs it (gunicorn with smsgw.runtime.gunicorn_conf): bad
input that is refused before or around Django still answers in the API's envelope, and the client can read
the answer. A 10 MB body is a 413 a client that writes the whole body first (Python's http.client) reads,
not a reset connection; a 5,000-character cursor is a 400 naming cursor, not gunicorn's HTML 414; a URL past
the API's limit is a 414 naming url, from Django below gunicorn's limit and from gunicorn above it."""

from __future__ import annotations

import base64
import http.client
import json

import pytest
from django.db import connection

from bench.harness.devprocs import BIN
from scheduling.models import Message
from tests import processes
from tests.factories import tenant_with_key

pytestmark = pytest.mark.integration
TEN_MB = 10 * 1024 * 1024


@pytest.fixture
def web(transactional_db):
    tenant, key = tenant_with_key("acme")
    connection.close()  # gunicorn is another process: hold no connection it could wait on
    port = processes.free_port()
    proc = processes.Proc(
        "web",
        [
            str(BIN / "gunicorn"),
            "config.wsgi",
            "--config",
            "python:smsgw.runtime.gunicorn_conf",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            "--worker-class",
            "gthread",
            "--no-control-socket",  # gunicorn's default is one socket per host: tests run several
        ],
        processes.process_env(SMSGW_API_RATE_PER_SECOND="0"),
        ready_marker="Booting worker",
    )
    try:
        yield port, tenant, key
    finally:
        proc.stop()


def request(port: int, method: str, path: str, body: bytes | None = None, **headers: str):
    """One request on its own connection: (status, headers, body). http.client sends the whole body before
    it reads the answer, as many SDKs do."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Host": "127.0.0.1", **headers})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def envelope(status: int, headers: dict, body: bytes, expected: int, field: str) -> dict:
    assert status == expected, (status, body[:300])
    # Django's answers are problem details (smsgw.http.problems); gunicorn's own refusals, before the
    # application, the envelope alone (smsgw.runtime.gunicorn_errors). Both carry the envelope.
    assert headers["Content-Type"].startswith(("application/problem+json", "application/json")), body[:300]
    if headers["Content-Type"].startswith("application/problem+json"):
        assert json.loads(body)["request_id"] == headers["Request-Id"], body[:300]
    error = json.loads(body)["error"]
    assert error["code"] and error["message"] and field in error["fields"], error
    return error


def test_a_10_mb_json_body_is_a_413_the_client_reads(web):
    port, _, key = web
    body = b'{"to": "+14155550123", "body": "' + b"x" * TEN_MB + b'"}'
    answer = request(
        port,
        "POST",
        "/v1/messages",
        body,
        **{"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    assert envelope(*answer, 413, "body")["code"] == "request_too_large"
    assert not Message.objects.exists()


def test_a_10_mb_form_to_the_twilio_api_is_a_413_the_client_reads(web):
    port, tenant, key = web
    auth = base64.b64encode(f"{tenant.facade_account_sid}:{key}".encode()).decode()
    status, headers, body = request(
        port,
        "POST",
        f"/2010-04-01/Accounts/{tenant.facade_account_sid}/Messages.json",
        b"To=%2B14155550123&Body=" + b"x" * TEN_MB,
        **{"Authorization": f"Basic {auth}", "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 413 and headers["Content-Type"].startswith("application/json"), body[:300]
    assert json.loads(body)["status"] == 413
    assert not Message.objects.exists()


def test_a_5000_character_cursor_is_a_400_naming_cursor(web):
    port, _, key = web
    cursor = base64.b64encode(b"p=" + b"1" * 3700).decode()
    assert len(cursor) > 4900  # past gunicorn's default request line (4094): its HTML 414 before
    answer = request(port, "GET", f"/v1/messages?cursor={cursor}", Authorization=f"Bearer {key}")
    envelope(*answer, 400, "cursor")


@pytest.mark.parametrize("length", [8100, 20_000], ids=["from-django", "from-gunicorn"])
def test_a_url_past_the_limit_is_a_json_414_naming_url(web, length):
    port, _, key = web
    answer = request(port, "GET", "/v1/messages?x=" + "a" * length, Authorization=f"Bearer {key}")
    assert envelope(*answer, 414, "url")["code"] == "url_too_long"


def test_headers_past_gunicorns_limit_are_a_json_431(web):
    port, _, _ = web
    answer = request(port, "GET", "/v1/messages", **{"X-Big": "a" * 9000})
    envelope(*answer, 431, "headers")
