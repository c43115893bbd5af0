"""Provider callbacks run through the callbacks' middleware chain (smsgw.http.callback_chain), every other
path through settings.MIDDLEWARE whole; and the callback's INSERT is a prepared statement on PostgreSQL
(smsgw.runtime.db.fetchone_prepared)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from twilio.request_validator import RequestValidator

from receipts.models import ReceiptEvent
from smsgw.http.callback_chain import CallbackChainMiddleware, callback_middleware, is_callback_path
from tests.plans import prepared_statements

# The receipts tests' settings (a public URL and Twilio's token) and the URL their callbacks are signed for.
from tests.receipts.test_receipts import URL, cfg  # noqa: F401  (cfg: a fixture)

TOKEN = "receipt-test-token"

pytestmark = pytest.mark.django_db


def signed(params: dict) -> dict:
    return {"HTTP_X_TWILIO_SIGNATURE": RequestValidator(TOKEN).compute_signature(URL, params)}


def delivered(sid: str) -> dict:
    return {"MessageSid": sid, "MessageStatus": "delivered", "AccountSid": "AC" + "0" * 32}


def test_the_callbacks_chain_is_the_full_one_less_what_callbacks_do_not_use():
    chain = callback_middleware(settings.MIDDLEWARE)

    assert chain == [
        "smsgw.http.request_metrics.RequestMetricsMiddleware",
        "smsgw.http.request_id.RequestIdMiddleware",
        "smsgw.http.boundary.ApiBoundaryMiddleware",
        "django.middleware.security.SecurityMiddleware",
        "django.middleware.common.CommonMiddleware",
        "smsgw.runtime.logs_json.LogContextMiddleware",
    ]
    assert settings.MIDDLEWARE[0] == "smsgw.http.callback_chain.CallbackChainMiddleware"
    # Building it leaves the setting as it was (Django's load_middleware reads the setting itself).
    CallbackChainMiddleware(lambda request: None)
    assert settings.MIDDLEWARE[0] == "smsgw.http.callback_chain.CallbackChainMiddleware"
    assert "django.contrib.sessions.middleware.SessionMiddleware" in settings.MIDDLEWARE


@pytest.mark.parametrize(
    ("path", "callback"),
    [
        ("/receipts/twilio/", True),
        ("/inbound/vonage/", True),
        ("/v1/messages", False),
        ("/admin/", False),
        ("/receiptsx/", False),
    ],
)
def test_which_paths_are_callbacks(path, callback):
    assert is_callback_path(path) is callback


@pytest.mark.usefixtures("cfg")
def test_a_callback_skips_the_admin_layers_and_the_api_keeps_them():
    sid = "SM" + "a" * 32
    client = Client()

    stored = client.post("/receipts/twilio/", delivered(sid), **signed(delivered(sid)))
    api = client.get("/v1/messages")

    assert stored.status_code == 201
    assert ReceiptEvent.objects.filter(provider_message_id=sid).count() == 1
    # XFrameOptionsMiddleware is one of the layers a callback skips; the API's answer has its header.
    assert "X-Frame-Options" not in stored.headers
    assert api.status_code == 401
    assert api.headers["X-Frame-Options"] == "DENY"
    # CommonMiddleware is kept: the answer says its length.
    assert stored.headers["Content-Length"] == "0"


@pytest.mark.usefixtures("cfg")
def test_the_callbacks_chain_keeps_the_boundary_and_the_https_redirect(settings):
    refused = Client().post("/receipts/twilio/", delivered("SM" + "b" * 32), HTTP_X_TWILIO_SIGNATURE="forged")
    settings.SECURE_SSL_REDIRECT = True
    redirected = Client().post("/receipts/twilio/", delivered("SM" + "b" * 32))

    assert refused.status_code == 403
    assert refused.json()["error"]["fields"] == {"X-Twilio-Signature": ["missing or invalid signature"]}
    assert redirected.status_code == 301
    assert redirected.headers["Location"].startswith("https://")
    assert not ReceiptEvent.objects.exists()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="server-side prepared statements")
@pytest.mark.usefixtures("cfg")
def test_the_callback_insert_is_prepared_once_per_connection_and_still_tells_a_duplicate():
    client = Client()
    first = [
        client.post("/receipts/twilio/", p, **signed(p)) for p in (delivered(f"SM{i:032d}") for i in range(3))
    ]
    again = client.post("/receipts/twilio/", delivered("SM" + "0" * 32), **signed(delivered("SM" + "0" * 32)))

    prepared = prepared_statements("INSERT INTO %receiptevent%")
    assert [r.status_code for r in first] == [201, 201, 201]
    assert again.status_code == 200  # a duplicate: no row returned by the prepared INSERT
    assert ReceiptEvent.objects.count() == 3
    assert len(prepared) == 1, prepared
    assert "ON CONFLICT" in prepared[0]
