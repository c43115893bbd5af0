"""No log line holds a message body, a full phone number, a metadata value or a secret (docs/api.md, "Bad input, error responses and log redaction"),
including the database's error text (``DETAIL: Failing row contains (…)``, ``LINE 1: …``) inside the
tracebacks Django writes for a 500 and Celery writes for a failed task.

The scan test runs a scenario with real failures through the handlers the processes really use: the
root "console" handler configured by settings.LOGGING (web), and a handler set up through Celery's
``after_setup_logger`` signal (workers), with the root logger at DEBUG and SQL statement logging on."""

from __future__ import annotations

import io
import json
import logging
import secrets
from datetime import timedelta

import pytest
from celery.signals import after_setup_logger
from django.db import connection
from rest_framework.test import APIClient

from config.celery import app
from delivery.providers import get_adapter
from delivery.sending import worker as sending
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from smsgw.runtime.logs import Redact, RepeatLimit, redact
from tests.factories import SENDER, tenant_with_key
from tests.sandbox_process import SandboxProcess

pytestmark = pytest.mark.django_db

NUMBER = "+14155550187"  # the recipient: never in full in a log line
PROVIDER_NUMBER = "+14155550166"  # a recipient the provider refuses


@pytest.fixture(scope="module")
def sandbox():
    with SandboxProcess() as process:
        yield process


@pytest.fixture
def captured(settings):
    """Every line the web's console handler and a Celery worker's handler write, root at DEBUG."""
    root = logging.getLogger()
    console = next(h for h in root.handlers if h.get_name() == "console")
    web_out, worker_out = io.StringIO(), io.StringIO()
    old_stream = console.setStream(web_out)
    worker = logging.StreamHandler(worker_out)
    worker.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    holder = logging.Logger("celery-root-stand-in")
    holder.addHandler(worker)
    after_setup_logger.send(
        sender=None, logger=holder, loglevel=logging.DEBUG, logfile=None, format="", colorize=False
    )
    root.addHandler(worker)
    # Every line is kept: "Internal Server Error: %s" twice within the window would be written once.
    limits = [f for h in (console, worker) for f in h.filters if isinstance(f, RepeatLimit)]
    windows = [f.window for f in limits]
    for f in limits:
        f.window = 0
    levels = {name: logging.getLogger(name).level for name in ("", "django", "django.db.backends")}
    for name in levels:
        logging.getLogger(name).setLevel(logging.DEBUG)
    connection.force_debug_cursor = True  # django.db.backends logs every statement with its parameters
    try:
        yield lambda: web_out.getvalue() + worker_out.getvalue()
    finally:
        connection.force_debug_cursor = False
        for f, window in zip(limits, windows, strict=True):
            f.window = window
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        root.removeHandler(worker)
        console.setStream(old_stream)


@app.task(name="tests.message_copy_invalid", ignore_result=True)
def message_copy_invalid_task(message_id: int) -> None:
    from tests.smsgw.http.failing_urls import message_copy_invalid

    message_copy_invalid(message_id)


def test_a_run_with_failures_logs_no_body_number_metadata_or_secret(captured, settings, sandbox):
    settings.ROOT_URLCONF = "tests.smsgw.http.failing_urls"
    settings.WEBHOOK_ALLOW_PRIVATE = settings.WEBHOOK_ALLOW_HTTP = True
    settings.SMSGW_PROVIDER = "twilio"
    settings.TWILIO_API_BASE_URL = sandbox.base_url
    settings.TWILIO_ACCOUNT_SID = sandbox.account_sid
    settings.TWILIO_AUTH_TOKEN = sandbox.auth_token
    get_adapter.cache_clear()
    sandbox.reset()

    body = f"Your code is {secrets.token_hex(4)}, it's private"
    meta = f"order-{secrets.token_hex(5)}"
    tenant, api_key = tenant_with_key("acme")
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key}")

    created = client.post(
        "/v1/messages", {"to": NUMBER, "body": body, "metadata": {"ref": meta}}, format="json"
    )
    assert created.status_code == 201, created.content
    pk = Message.objects.get(public_id=created.json()["id"]).pk
    hook = client.put("/v1/webhook", {"url": "http://127.0.0.1:9/hook"}, format="json")
    assert hook.status_code == 200, hook.content
    webhook_secret = hook.json()["secret"]

    # Rejected input (4xx), and failures: two 500s from the database, a task failing on an INSERT, a
    # service logging the exception it caught, a provider refusing a number.
    bad = json.dumps({"metadata": {"ref": meta + "__"}}).replace("__", "\\u0000")
    assert (
        client.generic(
            "PATCH", f"/v1/messages/{created.json()['id']}", bad, content_type="application/json"
        ).status_code
        == 400
    )
    assert client.get("/v1/messages", {"to": NUMBER, "cursor": "forged"}).status_code == 400
    assert client.post("/v1/_test/insert-failure", {"pk": pk}, format="json").status_code == 500
    assert client.post("/v1/_test/sql-failure", {"pk": pk}, format="json").status_code == 500
    message_copy_invalid_task.apply(args=[pk])
    try:
        message_copy_invalid_task.run(pk)
    except Exception as exc:
        logging.getLogger("scheduling.messages.service").exception("could not copy message: %s", exc)
        logging.getLogger("scheduling.messages.service").error("copy failed (%r) for %s", exc, NUMBER)

    sandbox.config(rules=[{"to": PROVIDER_NUMBER, "action": "400", "error_code": 21211}])
    refused = Message.objects.create(
        tenant=tenant,
        to=PROVIDER_NUMBER,
        body=body,
        metadata={"ref": meta},
        encoding="GSM-7",
        segments=1,
        from_number=SENDER,
        due_at=Message.objects.get(pk=pk).due_at,
        expires_at=Message.objects.get(pk=pk).expires_at,
    )
    transitions.event_record(refused.pk, kind="created", status=Status.SCHEDULED)
    transitions.transition(
        refused.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued"
    )
    sending.send_batch([refused.pk])
    refused.refresh_from_db()
    assert refused.status == Status.FAILED
    get_adapter.cache_clear()

    out = captured()

    # The scenario really logged its failures (a scan of nothing would prove nothing).
    assert "Internal Server Error: /v1/_test/insert-failure" in out
    assert "Internal Server Error: /v1/_test/sql-failure" in out
    assert "Traceback (most recent call last)" in out
    assert "tests.message_copy_invalid" in out and "raised unexpected" in out
    assert "could not copy message" in out and "INSERT INTO" in out
    forbidden = {
        "body": body,
        "body (escaped)": body.replace("'", "\\'"),
        "metadata value": meta,
        "number": NUMBER,
        "number digits": NUMBER[1:],
        "provider-refused number": PROVIDER_NUMBER,
        "sender": SENDER,
        "API key": api_key,
        "API key secret": api_key.rsplit("_", 1)[1],
        "webhook secret": webhook_secret,
        "Twilio auth token": sandbox.auth_token,
    }
    leaks = {
        what: [line for line in out.splitlines() if value in line][:3]
        for what, value in forbidden.items()
        if value in out
    }
    assert not leaks, leaks
    if connection.vendor == "postgresql":  # the database's detail was there, and was cut
        assert "violates check constraint" in out and "[database detail [redacted]]" in out


# --- the filter itself ------------------------------------------------------------------------------------

PG_ERROR = (
    'new row for relation "scheduling_message" violates check constraint "segments_check"\n'
    'DETAIL:  Failing row contains (7, +14155550187, a body with\na newline, {"ref": "secret-meta"}).'
)


@pytest.mark.parametrize(
    ("text", "kept", "gone"),
    [
        (PG_ERROR, "violates check constraint", ["+14155550187", "a body", "newline", "secret-meta"]),
        (repr(Exception(PG_ERROR)), "violates check constraint", ["14155550187", "a body", "secret-meta"]),
        (
            "syntax error at end of input\nLINE 1: SELECT 'the body' FROM\n                                ^",
            "syntax error",
            ["the body"],
        ),
        ('invalid input syntax for type integer: "+14155550187"', "invalid input syntax", ["14155550187"]),
        (
            'duplicate key value violates unique constraint "k"\nDETAIL:  Key (idempotency_key)=(idem-1) already exists.',
            "unique constraint",
            ["idem-1"],
        ),
        ("Authorization: Bearer sk_abcd_s3cr3tvalue", "sk_abcd_", ["s3cr3tvalue"]),
        ("signing with whsec_QUJDREVGR0g=", "whsec_", ["QUJDREVGR0g"]),
        ("to=%2B14155550187&x=1", "to=", ["14155550187"]),
        ("number 14155550187 refused", "refused", ["14155550187"]),
    ],
)
def test_redact_keeps_the_first_line_and_masks_data_and_secrets(text, kept, gone):
    out = redact(text)
    assert kept in out
    for value in gone:
        assert value not in out, out


def test_redact_leaves_ordinary_lines_alone():
    line = "sweep: released 12 of 500 due messages in 3.2 ms at 2026-12-01 09:00:00 (msg_0123456789abcdef01234567)"
    assert redact(line) == line


def test_the_filter_rewrites_message_exception_and_sql_records(settings):
    settings.TWILIO_AUTH_TOKEN = "tok-" + "9" * 28
    try:
        raise ValueError(PG_ERROR)
    except ValueError:
        import sys

        record = logging.LogRecord(
            "x",
            logging.ERROR,
            __file__,
            1,
            "failed: %s (%s)",
            (PG_ERROR, settings.TWILIO_AUTH_TOKEN),
            sys.exc_info(),
        )
    assert Redact().filter(record)
    text = logging.Formatter().format(record)
    assert "failed: new row" in text and "Traceback" in text and "ValueError" in text
    for value in ("14155550187", "a body", "secret-meta", settings.TWILIO_AUTH_TOKEN):
        assert value not in text
    sql = logging.LogRecord(
        "django.db.backends",
        logging.DEBUG,
        __file__,
        1,
        "(%.3f) %s; args=%s; alias=%s",
        (
            0.001,
            "INSERT INTO m VALUES ('+14155550187', 'it''s the body')",
            ("+14155550187", 'it\'s "the body"'),
            "default",
        ),
        None,
    )
    assert Redact().filter(sql)
    assert "the body" not in sql.getMessage() and "14155550187" not in sql.getMessage()
    assert "INSERT INTO m" in sql.getMessage()


def test_celery_and_settings_install_the_filter_last_on_every_handler():
    handler = logging.StreamHandler(io.StringIO())
    holder = logging.Logger("stand-in")
    holder.addHandler(handler)
    after_setup_logger.send(
        sender=None, logger=holder, loglevel=logging.INFO, logfile=None, format="", colorize=False
    )
    assert isinstance(handler.filters[-1], Redact)
    console = next(h for h in logging.getLogger().handlers if h.get_name() == "console")
    assert isinstance(console.filters[-1], Redact)
    assert logging.getLogger("django").handlers == [], "django's own console handler would print unredacted"


def test_gunicorn_access_lines_are_redacted():
    from types import SimpleNamespace

    from gunicorn.config import Config

    from smsgw.runtime.gunicorn_logging import RedactingLogger

    cfg = Config()
    cfg.set("accesslog", "-")
    logger = RedactingLogger(cfg)
    out = io.StringIO()
    for handler in logger.access_log.handlers:
        handler.setStream(out)
    environ = {
        "REQUEST_METHOD": "GET",
        "RAW_URI": "/v1/messages?to=%2B14155550187",
        "PATH_INFO": "/v1/capacity/senders/+14155550100",
        "QUERY_STRING": "to=%2B14155550187",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
    }
    req = SimpleNamespace(headers=[("AUTHORIZATION", "Bearer sk_abcd_s3cr3t")], uri=environ["RAW_URI"])
    resp = SimpleNamespace(status="200 OK", sent=10, headers=[], response_length=10)
    logger.access(resp, req, environ, timedelta(seconds=0.01))
    line = out.getvalue()
    assert "GET /v1/messages" in line
    assert "14155550187" not in line and "s3cr3t" not in line


def test_gunicorns_access_line_carries_the_request_id():
    from types import SimpleNamespace

    from gunicorn.config import Config

    from smsgw.runtime import gunicorn_conf
    from smsgw.runtime.gunicorn_logging import RedactingLogger

    cfg = Config()
    cfg.set("accesslog", "-")
    cfg.set("access_log_format", gunicorn_conf.access_log_format)
    logger = RedactingLogger(cfg)
    out = io.StringIO()
    for handler in logger.access_log.handlers:
        handler.setStream(out)
    environ = {
        "REQUEST_METHOD": "GET",
        "RAW_URI": "/v1/messages",
        "PATH_INFO": "/v1/messages",
        "QUERY_STRING": "",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
    }
    req = SimpleNamespace(headers=[], uri=environ["RAW_URI"])
    headers = [("Request-Id", "req_0123456789abcdef0123456789abcdef")]
    resp = SimpleNamespace(status="200 OK", sent=10, headers=headers, response_length=10)
    logger.access(resp, req, environ, timedelta(seconds=0.01))
    assert out.getvalue().rstrip().endswith(" request_id=req_0123456789abcdef0123456789abcdef")
