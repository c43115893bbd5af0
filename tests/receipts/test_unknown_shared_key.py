"""A callback signed with a SharedKey id this host does not hold is our configuration's fault, not the
caller's: it answers 503 (not a 403), is logged in one line and counted, stores nothing, and the message
it names is looked up by sid at the next status look-up run instead of an hour after it was sent."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from twilio.request_validator import RequestValidator

from receipts.lookup import lookup_soon, stale_sent_due
from receipts.models import ReceiptEvent, StatusLookup
from tests.factories import tenant_with_key
from tests.metrics import TOKEN, scrape, value
from tests.receipts.test_receipt_effects import PUBLIC, callback, sent_message, sid

pytestmark = pytest.mark.django_db
METRIC = "smsgw_callbacks_key_unknown_total"
SOON = timedelta(minutes=5)


@pytest.fixture
def cfg(settings):
    from delivery.providers import get_adapter

    settings.SMSGW_PUBLIC_BASE_URL = PUBLIC
    settings.TWILIO_AUTH_TOKEN = "receipt-test-token"
    settings.TWILIO_WEBHOOK_SHARED_KEYS = {"wk1": "shared-secret"}
    settings.STATUS_LOOKUP_AFTER_SECONDS = 3600
    settings.METRICS_TOKEN = TOKEN
    get_adapter.cache_clear()
    yield settings
    get_adapter.cache_clear()


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


def post_signed_with(key_id: str, secret: str, params: dict):
    path = "/receipts/twilio/"
    signature = RequestValidator(secret).compute_signature(PUBLIC + path, params, "HMAC_SHA256")
    return Client().post(
        path,
        params,
        HTTP_X_TWILIO_SIGNATURE=signature,
        HTTP_X_TWILIO_WEBHOOKS_SIGNATURE_SETTINGS=f"key={key_id},algorithm=HMAC_SHA256",
    )


def due_ids(at) -> set[int]:
    return {row["id"] for row in stale_sent_due(at, 100)}


def test_an_unknown_key_id_answers_503_is_counted_and_its_message_is_looked_up_soon(
    cfg, tenant, client, caplog
):
    msg = sent_message(tenant, sid(41))
    other = sent_message(tenant, sid(42))
    now = timezone.now()
    assert msg.pk not in due_ids(now + SOON)  # sent just now: normally looked up after an hour
    before = value(scrape(client), METRIC, provider="twilio")

    with caplog.at_level(logging.ERROR, logger="receipts.api"):
        resp = post_signed_with("KSrotated", "a-secret-we-do-not-hold", callback(sid(41), "delivered"))

    assert resp.status_code == 503
    assert resp.json()["error"]["fields"] == {
        "X-Twilio-Webhooks-Signature-Settings": ["signing key not configured here"]
    }
    assert ReceiptEvent.objects.count() == 0  # not verified: nothing of it is stored
    assert value(scrape(client), METRIC, provider="twilio") - before == 1
    [line] = [r.getMessage() for r in caplog.records if r.name == "receipts.api"]
    assert "'KSrotated'" in line and sid(41) in line and "TWILIO_WEBHOOK_SHARED_KEYS" in line
    assert "+1415" not in line and "delivered" not in line  # no number, nothing of the callback's content
    # due within 5 minutes (at the next run), the other message still after its hour
    lookup = StatusLookup.objects.get(message=msg)
    assert lookup.tries == 0 and lookup.next_at <= timezone.now() + SOON
    due = due_ids(timezone.now() + SOON)
    assert msg.pk in due and other.pk not in due
    assert stale_sent_due(timezone.now() + SOON, 1)[0]["provider_message_id"] == sid(41)  # before stale ones


def test_a_known_key_is_still_verified_and_a_wrong_signature_still_refused_with_403(cfg, tenant, client):
    msg = sent_message(tenant, sid(43))
    before = value(scrape(client), METRIC, provider="twilio")
    assert post_signed_with("wk1", "not-the-secret", callback(sid(43), "delivered")).status_code == 403
    assert post_signed_with("wk1", "shared-secret", callback(sid(43), "delivered")).status_code == 201
    assert value(scrape(client), METRIC, provider="twilio") == before
    assert not StatusLookup.objects.filter(message=msg).exists()


def test_an_unknown_key_for_a_sid_we_never_sent_still_answers_503(cfg, tenant):
    resp = post_signed_with("KSother", "x", callback(sid(44), "sent"))
    assert resp.status_code == 503
    assert not StatusLookup.objects.exists()


def test_looked_up_soon_again_after_a_look_up_but_never_once_stopped(cfg, tenant):
    msg = sent_message(tenant, sid(45))
    now = timezone.now()
    StatusLookup.objects.create(message=msg, tries=2, next_at=now + timedelta(hours=2))
    assert lookup_soon("twilio", sid(45), now=now) == msg.pk
    row = StatusLookup.objects.get(message=msg)
    assert (row.tries, row.next_at) == (0, now)
    assert msg.pk in due_ids(now)

    StatusLookup.objects.filter(message=msg).update(tries=5, gave_up_at=now, next_at=now + timedelta(days=1))
    lookup_soon("twilio", sid(45), now=now)
    row.refresh_from_db()
    assert row.tries == 5 and row.gave_up_at == now
    assert msg.pk not in due_ids(now + SOON)
