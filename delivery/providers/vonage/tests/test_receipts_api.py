"""Vonage's signed callbacks through the endpoints (receipts.api): a forged or replayed receipt refused
and nothing stored, a correctly signed one taken; STOP, START and HELP through ``/inbound/vonage/`` as
Twilio's, signed, in each of Vonage's webhook methods, stored and then processed (inbound.process), and
a replayed START a duplicate that changes nothing."""

from __future__ import annotations

import itertools
import time
from types import SimpleNamespace
from urllib.parse import urlencode

import pytest
from django.test import Client

from delivery.models import Suppression, SuppressionChange
from delivery.providers.vonage import callbacks as vonage_callbacks
from delivery.providers.vonage.sandbox.parts import signature
from receipts.models import ReceiptEvent
from tests.factories import SENDER, recipient, tenant_with_key
from tests.inbound.processing import inbound_processed, inbound_states

pytestmark = pytest.mark.django_db
SECRET = "endpoint-signature-secret"
API_KEY = "a1b2c3d4"
OUR_NUMBER = SENDER.lstrip("+")  # Vonage writes numbers without the "+"
_nonces = itertools.count()


@pytest.fixture(autouse=True)
def vonage_signed(settings):
    settings.VONAGE_API_KEY = API_KEY
    settings.VONAGE_SIGNATURE_SECRET = SECRET
    settings.VONAGE_SIGNATURE_METHOD = "sha256"
    settings.VONAGE_SIGNATURE_MAX_AGE_SECONDS = 300
    return settings


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


def sign(fields: dict, *, at: float | None = None) -> dict:
    params = {
        **fields,
        "api-key": API_KEY,
        "timestamp": str(int(time.time() if at is None else at)),
        "nonce": f"nonce-{next(_nonces)}",
    }
    return {**params, "sig": signature(params, SECRET, "sha256")}


def receipt(message_id: str = "0A0000001234ABCD", status: str = "delivered") -> dict:
    return {
        "msisdn": "447700900001",
        "to": "SMSGW",
        "messageId": message_id,
        "status": status,
        "err-code": "0",
        "scts": "2612041000",
        "message-timestamp": "2026-12-04 10:00:00",
    }


def post_receipt(params: dict):
    return Client().post("/receipts/vonage/", params, content_type="application/json")


def test_a_correctly_signed_receipt_is_taken():
    assert post_receipt(sign(receipt())).status_code == 201
    assert ReceiptEvent.objects.filter(provider="vonage", raw_status="delivered").count() == 1


def test_a_forged_receipt_is_refused_and_nothing_is_stored():
    genuine = sign(receipt(status="failed"))
    forged = {**genuine, "status": "delivered"}
    answer = post_receipt(forged)
    assert answer.status_code == 403
    assert answer.json()["error"]["fields"] == {"sig": ["missing or invalid signature"]}
    assert post_receipt(receipt()).status_code == 403  # unsigned
    assert not ReceiptEvent.objects.exists()


def test_a_replayed_receipt_is_refused_even_inside_the_window():
    params = sign(receipt(status="accepted"))
    assert post_receipt(params).status_code == 201
    replayed = post_receipt(params)
    assert replayed.status_code == 403
    assert replayed.json()["error"]["fields"] == {"sig": ["already used: a replayed callback"]}
    # The same signature in lower case is the same signature.
    assert post_receipt({**params, "sig": params["sig"].lower()}).status_code == 403
    assert ReceiptEvent.objects.count() == 1


@pytest.mark.parametrize("age", [301, -301, 3600])
def test_a_receipt_signed_outside_the_window_is_refused_naming_timestamp(age, monkeypatch):
    # The check's clock stands still at the signing time: a timestamp 301 s ahead, truncated to whole
    # seconds, is 300.x s ahead, and a request that took the rest of that second would land inside.
    now = time.time()
    monkeypatch.setattr(vonage_callbacks, "time", SimpleNamespace(time=lambda: now))
    answer = post_receipt(sign(receipt(), at=now - age))
    assert answer.status_code == 403
    assert list(answer.json()["error"]["fields"]) == ["timestamp"]
    assert not ReceiptEvent.objects.exists()


def test_a_receipt_that_failed_to_store_can_be_sent_again(monkeypatch):
    import receipts.api

    params = sign(receipt())

    def broken(**kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(receipts.api, "receipt_ingest", broken)
    with pytest.raises(RuntimeError):
        post_receipt(params)
    monkeypatch.undo()
    assert post_receipt(params).status_code == 201  # Vonage's retry of the same request is taken


# --- inbound ----------------------------------------------------------------------------------------------


def inbound(text: str, frm: str, **extra) -> dict:
    return {
        "msisdn": frm.lstrip("+"),
        "to": OUR_NUMBER,
        "messageId": f"0A00000000{next(_nonces):06d}",
        "text": text,
        "type": "text",
        "keyword": text.strip().split(" ")[0].upper() if text.strip() else "",
        "message-timestamp": "2026-12-04 10:00:00",
        **extra,
    }


def post_inbound(params: dict, how: str = "json"):
    """Post, then process what was stored, as the inbound tick does (inbound.process)."""
    if how == "json":
        answer = Client().post("/inbound/vonage/", params, content_type="application/json")
    elif how == "form":
        answer = Client().post("/inbound/vonage/", params)
    else:
        answer = Client().get("/inbound/vonage/?" + urlencode(params))
    inbound_processed()
    return answer


@pytest.mark.parametrize("how", ["json", "form", "get"])
def test_stop_then_start_through_signed_vonage_inbound_webhooks(tenant, how):
    to = recipient(1)
    answer = post_inbound(sign(inbound(" sToP ", to)), how)
    assert answer.status_code == 200
    entry = Suppression.objects.get()
    assert (entry.tenant_id, entry.number, entry.sender, entry.source) == (
        tenant.pk,
        to,
        SENDER,
        "inbound_keyword",
    )
    assert post_inbound(sign(inbound("START", to)), how).status_code == 200
    assert not Suppression.objects.exists()
    changes = list(SuppressionChange.objects.order_by("id").values_list("action", "keyword", "actor"))
    assert changes == [("added", "STOP", "recipient"), ("removed", "START", "recipient")]


def test_help_is_recorded_and_other_text_or_a_fragment_changes_nothing(tenant):
    to = recipient(2)
    assert post_inbound(sign(inbound("stop it please", to))).status_code == 200
    part = inbound("STOP", to, concat="true", **{"concat-ref": "7", "concat-total": "2", "concat-part": "2"})
    assert post_inbound(sign(part)).status_code == 200
    assert not Suppression.objects.exists()
    assert post_inbound(sign(inbound("help", to))).status_code == 200
    assert list(SuppressionChange.objects.values_list("action", "keyword")) == [("help", "HELP")]


def test_unsigned_forged_or_stale_inbound_changes_nothing(tenant):
    to = recipient(3)
    assert post_inbound(inbound("STOP", to)).status_code == 403
    forged = {**sign(inbound("HELLO", to)), "text": "STOP"}
    assert post_inbound(forged).status_code == 403
    # Vonage resends an unanswered inbound message for 24 hours with its first timestamp: only past that
    # (and an hour's margin) is a signed one stale.
    stale = post_inbound(sign(inbound("STOP", to), at=time.time() - 26 * 3600))
    assert stale.status_code == 403 and list(stale.json()["error"]["fields"]) == ["timestamp"]
    assert not Suppression.objects.exists() and not SuppressionChange.objects.exists()


def test_a_retry_of_an_inbound_message_hours_later_is_taken_once(tenant):
    to = recipient(3)
    first = inbound("STOP", to)
    pushed = time.time() - 5 * 3600  # Vonage started to push it five hours ago; we answered 500 since
    assert post_inbound(sign(first, at=pushed)).status_code == 200
    assert post_inbound(sign(first, at=pushed)).status_code == 200
    assert Suppression.objects.filter(number=to).count() == 1
    # A receipt is still held to the receipts' five-minute window.
    late = post_receipt(sign(receipt(), at=time.time() - 600))
    assert late.status_code == 403 and list(late.json()["error"]["fields"]) == ["timestamp"]


def test_a_replayed_start_does_not_undo_a_later_stop(tenant):
    # A replay repeats the messageId: a duplicate, answered as Vonage expects (200) and never applied.
    to = recipient(4)
    start = sign(inbound("START", to))
    assert post_inbound(sign(inbound("STOP", to))).status_code == 200
    assert post_inbound(start).status_code == 200
    assert post_inbound(sign(inbound("STOP", to))).status_code == 200
    assert post_inbound(start).status_code == 200
    assert Suppression.objects.filter(number=to).exists()
    assert inbound_states() == ["routed"] * 3  # the replayed START stored once


def test_an_inbound_message_without_its_sender_names_the_field(tenant):
    params = inbound("STOP", recipient(5))
    del params["msisdn"]
    answer = post_inbound(sign(params))
    assert answer.status_code == 400 and list(answer.json()["error"]["fields"]) == ["msisdn"]


def test_an_inbound_keyword_to_a_number_that_is_not_ours_is_kept_unrouted_and_changes_nothing(tenant):
    # An alphanumeric sender cannot be answered, so a STOP "to" one is to no number of ours: kept for the
    # operators (never dropped), applied to nobody's list.
    answer = post_inbound(sign({**inbound("STOP", recipient(6)), "to": "SMSGW"}))
    assert answer.status_code == 200
    assert inbound_states() == ["unrouted"]
    assert not Suppression.objects.exists() and not SuppressionChange.objects.exists()


def test_twilio_inbound_is_post_only():
    answer = Client().get("/inbound/twilio/?Body=STOP")
    assert answer.status_code == 405 and answer["Allow"] == "POST"
    assert list(answer.json()["error"]["fields"]) == ["method"]
