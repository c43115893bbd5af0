"""JSON log lines (SMSGW_LOG_FORMAT=json): only the listed fields, redacted, with the tenant of the
request and the ids passed by the code; production picks JSON by default."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys

import pytest
from django.test import RequestFactory

from smsgw.runtime import logs_json
from smsgw.runtime.logs import QuietTicks, Redact, RepeatLimit

NUMBER = "+14155550143"


@pytest.fixture
def json_lines():
    """The production handler chain (filters, Redact last, then the JSON formatter) on the root logger."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    for f in (RepeatLimit(window=0), QuietTicks(), Redact()):
        handler.addFilter(f)
    handler.setFormatter(logs_json.JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    logs_json.context_clear()
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        root.removeHandler(handler)
        logs_json.context_clear()


def test_a_line_is_one_json_object_with_only_the_listed_fields_redacted(json_lines):
    request = RequestFactory().get(f"/v1/messages?to={NUMBER}")
    logging.getLogger("smsgw.test").warning(
        "send to %s failed",
        NUMBER,
        extra={"request": request, "body": "secret body", "message_id": "msg_abc", "status_code": 500},
    )
    (line,) = json_lines()
    assert set(line) == {"time", "level", "logger", "message", "process", "message_id"}
    assert line["level"] == "WARNING" and line["logger"] == "smsgw.test" and line["message_id"] == "msg_abc"
    assert line["message"] == "send to +***43 failed"
    text = json.dumps(line)
    assert NUMBER not in text and NUMBER[1:] not in text and "secret body" not in text


def test_an_exception_is_a_redacted_field(json_lines):
    try:
        raise ValueError(f"bad number {NUMBER}")
    except ValueError:
        logging.getLogger("smsgw.test").exception("it failed")
    (line,) = json_lines()
    assert "ValueError: bad number +***43" in line["exc_info"] and NUMBER not in json.dumps(line)


@pytest.mark.django_db
def test_an_api_requests_lines_name_its_tenant_and_the_next_request_does_not(json_lines, api):
    assert api.get("/v1/messages/msg_nope").status_code == 404  # django.request logs "Not Found"
    logging.getLogger("smsgw.test").info("between requests")
    lines = json_lines()
    not_found = [line for line in lines if line["logger"] == "django.request"]
    assert not_found and all(line["tenant"] == "acme" for line in not_found)
    assert "tenant" not in lines[-1], "the request's context ended with it"


@pytest.mark.django_db
def test_campaign_pause_resume_and_cancel_lines_keep_the_campaign_and_the_actor(json_lines):
    from scheduling.campaigns import control
    from tests.factories import campaign_with_messages, tenant_with_key

    tenant = tenant_with_key("acme")[0]
    campaign, _ = campaign_with_messages(tenant, 2)
    for act in (control.campaign_pause, control.campaign_resume, control.campaign_cancel):
        act(tenant=tenant, public_id=campaign.public_id, actor=f"admin:alice {NUMBER}")
    lines = [line for line in json_lines() if line["logger"] == control.log.name]
    assert [line["message"] for line in lines] == [
        "campaign paused",
        "campaign resumed",
        "campaign cancelled",
    ]
    for line in lines:
        assert line["campaign"] == campaign.public_id
        assert line["actor"] == "admin:alice +***43"  # redacted like every field
        assert NUMBER not in json.dumps(line)


def test_batch_ids_are_listed_and_bounded(json_lines):
    ids = [f"msg_{i:024d}" for i in range(50)]
    logging.getLogger("smsgw.test").warning("batch", extra={"message_ids": ids})
    (line,) = json_lines()
    assert line["message_ids"] == ids[: logs_json.MAX_IDS]


def test_production_logs_json_and_development_plain_text():
    code = "from django.conf import settings; print(settings.LOG_FORMAT)"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SMSGW_", "DJANGO_", "DATABASE_"))}

    def fmt(**env):
        run = subprocess.run(
            [sys.executable, "-c", "import django; django.setup(); " + code],
            env={**base, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        return run.stdout.strip()

    production = {
        "SMSGW_ENV": "production",
        "DATABASE_URL": "postgres://u@127.0.0.1:1/x",
        "DJANGO_SECRET_KEY": "k" * 20 + "Zx9!" * 10,
        "TWILIO_ACCOUNT_SID": "AC" + "1" * 32,
        "TWILIO_AUTH_TOKEN": "f" * 32,
    }
    assert fmt(**production) == "json"
    assert fmt(**production, SMSGW_LOG_FORMAT="plain") == "plain"
    assert fmt(SMSGW_ENV="development") == "plain"
