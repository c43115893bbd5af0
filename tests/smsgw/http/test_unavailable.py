"""The database unreachable under a request (its connection pointed at a port nothing listens on, or on
SQLite at a file that cannot be opened: the driver's own connection error, nothing mocked): the API answers
503 ``database_unavailable`` with Retry-After, as its schema documents, the admin a plain 503, and nothing
is logged at ERROR. Once the database is back the same request succeeds, and nothing was stored before.
The same through a real gunicorn and a cut TCP link: tests/integration/test_database_outage.py."""

from __future__ import annotations

import contextlib
import logging

import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection
from django.test import Client
from rest_framework.test import APIClient

from scheduling.models import Message
from smsgw.http import unavailable
from tests.factories import RECIPIENT, message, tenant_with_key
from tests.processes import free_port
from tests.smsgw.http.test_openapi_contract import Contract, served_schema

# SQLite half too: a locked SQLite database answers 503, as an unreachable PostgreSQL does.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sqlite]


@contextlib.contextmanager
def database_unreachable():
    """The default connection, closed, then pointed where connecting fails (and back afterwards)."""
    saved = dict(connection.settings_dict)
    connection.close()
    if connection.vendor == "sqlite":
        connection.settings_dict["NAME"] = "/nonexistent-smsgw-dir/unreachable.sqlite3"
    else:
        connection.settings_dict.update(HOST="127.0.0.1", PORT=str(free_port()))
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


def _error_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def test_post_message_while_the_database_is_unreachable_is_a_documented_503_and_stores_nothing(
    settings, caplog
):
    settings.DB_RETRY_AFTER_SECONDS = 7
    _, key = tenant_with_key("acme")
    contract = Contract(served_schema(), key)
    body = {"to": RECIPIENT, "body": "during the outage"}
    caplog.set_level(logging.INFO)
    with database_unreachable():
        for _ in range(3):
            error = contract.call("post", "/v1/messages", 503, data=body, HTTP_IDEMPOTENCY_KEY="k-1")
            assert error["error"] == {
                "code": "database_unavailable",
                "message": "The database is unavailable; retry in 7 s.",
                "retry_after": 7,
            }
            assert error["status"] == 503 and error["retry_after"] == 7, error
            assert error["type"].endswith("#database_unavailable"), error
        resp = APIClient(HTTP_AUTHORIZATION=f"Bearer {key}").get("/v1/messages")
        assert resp.status_code == 503 and resp["Retry-After"] == "7"
        contract.call("get", "/v1/quiet-hours", 503)
        assert Client().get("/healthz").status_code == 200  # liveness needs no database
    assert not _error_records(caplog), [r.getMessage() for r in _error_records(caplog)]
    noted = [r for r in caplog.records if r.name == "smsgw.http.unavailable"]
    assert noted and all(r.levelno == logging.WARNING for r in noted)
    assert {r.getMessage() for r in noted} == {
        "database unavailable (OperationalError): answering 503 with Retry-After 7 s"
    }

    assert Message.objects.count() == 0
    created = contract.call("post", "/v1/messages", 201, data=body, HTTP_IDEMPOTENCY_KEY="k-1")
    assert Message.objects.get().public_id == created["id"]


def test_admin_page_while_the_database_is_unreachable_is_a_plain_503(settings, caplog):
    settings.DB_RETRY_AFTER_SECONDS = 5
    user = get_user_model().objects.create_superuser("ops", "ops@example.com", "a-long-passphrase")
    client = Client(raise_request_exception=False)
    client.force_login(user)
    assert client.get("/admin/").status_code == 200
    caplog.set_level(logging.INFO)
    with database_unreachable():
        resp = client.get("/admin/")  # the session is read from the database: in a middleware's lazy user
    assert resp.status_code == 503
    assert resp["Retry-After"] == "5"
    assert resp["Content-Type"].startswith("text/plain")
    assert b"database is unavailable" in resp.content
    assert not _error_records(caplog), [r.getMessage() for r in _error_records(caplog)]
    # Still logged in: a 5xx answer neither saves nor drops the session (SessionMiddleware).
    assert client.get("/admin/").status_code == 200


def test_a_database_error_that_is_not_an_outage_is_still_a_500(settings):
    """A check violation on a reachable database is a bug to fix, not a moment to wait: 500, not 503."""
    settings.ROOT_URLCONF = "tests.smsgw.http.failing_urls"
    tenant, _ = tenant_with_key("acme")
    pk = message(tenant).pk
    resp = Client(raise_request_exception=False).post(
        "/v1/_test/insert-failure", {"pk": pk}, content_type="application/json"
    )
    assert resp.status_code == 500, resp.content
    assert resp.json()["error"]["code"] == "server_error"
    assert "Retry-After" not in resp
    assert not unavailable.is_unavailable(IntegrityError("duplicate key"))
