"""A Request-Id on every answer, in every log line of the request and in an error's body
(smsgw.http.request_id)."""

from __future__ import annotations

import json
import logging
import re

import pytest
from django.test import Client
from rest_framework.test import APIClient

from smsgw.http.request_id import MAX_LENGTH
from smsgw.runtime.logs_json import JsonFormatter, PlainFormatter, request_id
from tests.factories import RECIPIENT, tenant_with_key

OURS = re.compile(r"req_[0-9a-f]{32}")


@pytest.mark.parametrize(
    "path",
    [
        "/healthz",
        "/v1/no-such-endpoint",  # a 404 the edge answers as a problem
        "/2010-04-01/Accounts/AC0/Nothing.json",  # the Twilio-compatible API's own 404
        "/receipts/nope/",  # a provider callback's chain
    ],
)
def test_every_answer_carries_its_own_request_id(path):
    first, second = Client().get(path), Client().get(path)
    assert OURS.fullmatch(first["Request-Id"]) and OURS.fullmatch(second["Request-Id"])
    assert first["Request-Id"] != second["Request-Id"]
    assert request_id() is None  # cleared once the answer is closed: the next request starts without one


def test_an_error_body_carries_the_same_id_as_its_header():
    resp = Client().get("/v1/no-such-endpoint")
    assert resp.status_code == 404 and resp["Content-Type"].startswith("application/problem+json")
    body = resp.json()
    assert body["request_id"] == resp["Request-Id"] and body["code"] == "not_found"


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("HTTP_REQUEST_ID", "a1b2c3d4-e5f6-7890-abcd-ef0123456789"),
        ("HTTP_X_REQUEST_ID", "lb:trace.42_x"),
        ("HTTP_X_REQUEST_ID", "x" * MAX_LENGTH),
    ],
)
def test_a_short_plain_incoming_id_is_kept(header, value):
    assert Client().get("/healthz", **{header: value})["Request-Id"] == value


@pytest.mark.parametrize(
    "value",
    [
        "",
        "x" * (MAX_LENGTH + 1),
        "has space",
        'quote"d',
        "new\\nline",
        "semi;colon",
        "ünïcode",
        "+14155550123",
    ],
)
def test_anything_else_is_replaced_by_our_own_not_refused(value):
    resp = Client().get("/healthz", HTTP_REQUEST_ID=value, HTTP_X_REQUEST_ID=value)
    assert resp.status_code == 200 and OURS.fullmatch(resp["Request-Id"])


@pytest.mark.parametrize(("formatter", "read"), [(PlainFormatter, None), (JsonFormatter, json.loads)])
def test_every_log_line_of_the_request_carries_its_id(formatter, read):
    """django.request writes a 4xx's line after the middleware has returned: that line too."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(self.format(record))

    handler = Keep()
    handler.setFormatter(formatter())
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    try:
        resp = Client().get("/v1/no-such-endpoint", HTTP_X_REQUEST_ID="trace-1234")
        Client().get("/healthz")  # a request that logs nothing
        logging.getLogger("django.request").warning("outside any request")
    finally:
        logger.removeHandler(handler)
    assert resp["Request-Id"] == "trace-1234"
    assert len(lines) == 2, lines
    if read is None:
        assert lines[0].endswith(" request_id=trace-1234") and "request_id" not in lines[1]
    else:
        assert read(lines[0])["request_id"] == "trace-1234" and "request_id" not in read(lines[1])


@pytest.mark.django_db
def test_the_tenant_api_and_the_admin_answer_with_it_too():
    _, key = tenant_with_key("rid")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    created = api.post("/v1/messages", {"to": RECIPIENT, "body": "hi"}, format="json")
    refused = api.post("/v1/messages", {"to": RECIPIENT, "body": "hi", "timezone": "Nope"}, format="json")
    unauthenticated = APIClient().get("/v1/messages")
    admin = Client().get("/admin/login/")
    for resp in (created, refused, unauthenticated, admin):
        assert OURS.fullmatch(resp["Request-Id"]), resp
    assert refused.json()["request_id"] == refused["Request-Id"]
    assert unauthenticated.json()["request_id"] == unauthenticated["Request-Id"]
