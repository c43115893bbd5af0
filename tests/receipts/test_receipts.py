"""Receipt endpoint and status processor: signatures checked with the twilio SDK's own validator code,
duplicates and shuffles end in the furthest state with one timeline entry per distinct status."""

from __future__ import annotations

import json
import random
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from twilio.request_validator import RequestValidator

from receipts import processor
from receipts.models import ReceiptEvent, ReceiptOutcome
from receipts.processor import receipts_process_due
from scheduling.lifecycle import transitions
from scheduling.models import Message, MessageEvent, Status
from tests.factories import message, tenant_with_key
from tests.loops import passes_until_first_sleep

pytestmark = pytest.mark.django_db
PUBLIC = "https://sms.example.com"
URL = f"{PUBLIC}/receipts/twilio/"


@pytest.fixture
def cfg(settings):
    settings.SMSGW_PUBLIC_BASE_URL = PUBLIC
    settings.TWILIO_AUTH_TOKEN = "receipt-test-token"
    from delivery.providers import get_adapter

    get_adapter.cache_clear()
    yield settings
    get_adapter.cache_clear()


def signed_post(params: dict, *, token: str = "receipt-test-token", tamper: dict | None = None):
    signature = RequestValidator(token).compute_signature(URL, params)
    body = {**params, **(tamper or {})}
    return Client().post("/receipts/twilio/", body, HTTP_X_TWILIO_SIGNATURE=signature)


def callback(sid: str, status: str, **extra) -> dict:
    return {
        "MessageSid": sid,
        "SmsSid": sid,
        "MessageStatus": status,
        "SmsStatus": status,
        "AccountSid": "AC" + "0" * 32,
        "From": "+14155550100",
        "To": "+14155550123",
        "ApiVersion": "2010-04-01",
        **extra,
    }


def sent_message(tenant, sid: str) -> Message:
    msg = message(tenant)
    for src, dst in ((Status.SCHEDULED, Status.QUEUED), (Status.QUEUED, Status.SENDING)):
        transitions.transition(msg.pk, from_statuses=[src], to_status=dst, kind=dst)
    transitions.transition(
        msg.pk,
        from_statuses=[Status.SENDING],
        to_status=Status.SENT,
        kind="sent",
        set_fields={"provider": "twilio", "provider_message_id": sid, "sent_at": timezone.now()},
    )
    msg.refresh_from_db()
    return msg


def drain():
    ReceiptEvent.objects.filter(processed_at__isnull=True).update(next_try_at=timezone.now())
    while receipts_process_due():
        ReceiptEvent.objects.filter(processed_at__isnull=True).update(next_try_at=timezone.now())
        if not ReceiptEvent.objects.filter(processed_at__isnull=True, message__isnull=False).exists():
            break


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


def test_signed_callback_is_stored_redacted_and_applied(cfg, tenant):
    msg = sent_message(tenant, "SM" + "a" * 32)
    resp = signed_post(callback(msg.provider_message_id, "delivered"))
    assert resp.status_code == 201
    receipt = ReceiptEvent.objects.get()
    assert receipt.payload["To"] != "+14155550123" and receipt.payload["To"].endswith("23")
    assert "Body" not in receipt.payload
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.DELIVERED and msg.delivered_at == receipt.received_at
    assert msg.provider_status == "delivered"
    receipt.refresh_from_db()
    assert receipt.outcome == ReceiptOutcome.APPLIED and receipt.message_id == msg.pk


def test_batches_run_back_to_back_through_a_backlog_and_wait_once_caught_up(
    cfg, tenant, settings, monkeypatch
):
    """A batch that was not full waits the idle interval before the next claim, instead of claiming at
    once the few callbacks that arrived meanwhile (the first sleep ends this run)."""
    settings.RECEIPT_BATCH_SIZE = 2
    msgs = [sent_message(tenant, f"SM{i:032d}") for i in range(5)]
    for msg in msgs:
        assert signed_post(callback(msg.provider_message_id, "delivered")).status_code == 201
    batches = passes_until_first_sleep(
        monkeypatch,
        processor,
        "receipts_process_due",
        lambda claimed: claimed,
        lambda: processor.receipts_process_for(60, idle_sleep=0.05),
    )
    # Two full batches back to back, then the rest: caught up, so it sleeps without another claim.
    assert batches == [2, 2, 1]
    assert [m.status for m in Message.objects.filter(pk__in=[m.pk for m in msgs])] == [Status.DELIVERED] * 5
    assert not ReceiptEvent.objects.filter(processed_at__isnull=True).exists()


@pytest.mark.parametrize(
    "mutate",
    [
        {"tamper": {"MessageStatus": "failed"}},
        {"tamper": {"ErrorCode": "30003"}},
        {"token": "the-wrong-token"},
    ],
)
def test_tampered_or_wrongly_signed_callback_is_403_and_writes_nothing(cfg, tenant, mutate):
    msg = sent_message(tenant, "SM" + "b" * 32)
    resp = signed_post(callback(msg.provider_message_id, "delivered"), **mutate)
    assert resp.status_code == 403
    assert ReceiptEvent.objects.count() == 0
    msg.refresh_from_db()
    assert msg.status == Status.SENT


def test_missing_signature_and_wrong_url_are_refused(cfg, tenant, settings):
    assert Client().post("/receipts/twilio/", callback("SMx", "sent")).status_code == 403
    settings.SMSGW_PUBLIC_BASE_URL = "https://other.example.com"  # the provider signed another URL
    assert signed_post(callback("SMx", "sent")).status_code == 403
    assert ReceiptEvent.objects.count() == 0


def test_missing_field_huge_body_and_get_are_4xx_not_500(cfg):
    params = callback("SMx", "sent")
    del params["MessageSid"], params["SmsSid"]
    resp = signed_post(params)
    assert resp.status_code == 400 and "MessageSid" in resp.json()["error"]["fields"]
    huge = Client().post(
        "/receipts/twilio/", {"MessageSid": "SMx", "Body": "x" * 40000}, HTTP_X_TWILIO_SIGNATURE="sig"
    )
    assert huge.status_code == 413
    assert Client().get("/receipts/twilio/").status_code == 405
    assert ReceiptEvent.objects.count() == 0


def test_unknown_status_is_kept_raw_and_changes_nothing(cfg, tenant):
    msg = sent_message(tenant, "SM" + "c" * 32)
    events_before = msg.events.count()
    assert signed_post(callback(msg.provider_message_id, "teleported")).status_code == 201
    drain()
    receipt = ReceiptEvent.objects.get()
    assert receipt.outcome == ReceiptOutcome.UNKNOWN_STATUS and receipt.raw_status == "teleported"
    msg.refresh_from_db()
    assert msg.status == Status.SENT and msg.events.count() == events_before


def test_every_callback_three_times_shuffled_ends_furthest_with_one_entry_per_status(cfg, tenant):
    sids = [f"SM{i:032x}" for i in range(20)]
    msgs = [sent_message(tenant, sid) for sid in sids]
    finals = {sid: random.choice(["delivered", "undelivered", "failed"]) for sid in sids}
    posts = []
    for sid in sids:
        extra = {"ErrorCode": "30003"} if finals[sid] == "undelivered" else {}
        posts += [callback(sid, "sent")] * 3 + [callback(sid, finals[sid], **extra)] * 3
    random.Random(7).shuffle(posts)
    codes = [signed_post(p).status_code for p in posts]
    assert codes.count(201) == 40 and codes.count(200) == 80  # duplicates acknowledged, stored once
    drain()
    for msg in msgs:
        msg.refresh_from_db()
        sid = msg.provider_message_id
        assert msg.status == finals[sid], sid
        receipt_entries = list(
            MessageEvent.objects.filter(message=msg, details__has_key="receipt_id").values_list(
                "details", flat=True
            )
        )
        assert sorted(d["provider_status"] for d in receipt_entries) == sorted(["sent", finals[sid]])


def test_late_sent_after_delivered_changes_nothing(cfg, tenant):
    msg = sent_message(tenant, "SM" + "d" * 32)
    signed_post(callback(msg.provider_message_id, "delivered"))
    drain()
    signed_post(callback(msg.provider_message_id, "sent"))
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.DELIVERED
    assert msg.events.filter(kind="receipt", details__provider_status="sent").count() == 1


def test_receipt_before_the_provider_id_is_stored_is_kept_and_applied_later(cfg, tenant):
    sid = "SM" + "e" * 32
    msg = message(tenant)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    transitions.transition(
        msg.pk, from_statuses=[Status.QUEUED], to_status=Status.SENDING, kind="attempt_started"
    )
    assert signed_post(callback(sid, "delivered")).status_code == 201
    receipts_process_due()
    receipt = ReceiptEvent.objects.get()
    assert receipt.processed_at is None and receipt.outcome == ReceiptOutcome.PENDING and receipt.tries == 1
    # the submit response is recorded
    transitions.transition(
        msg.pk,
        from_statuses=[Status.SENDING],
        to_status=Status.SENT,
        kind="sent",
        set_fields={"provider": "twilio", "provider_message_id": sid},
    )
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.DELIVERED
    receipt.refresh_from_db()
    assert receipt.outcome == ReceiptOutcome.APPLIED


def test_receipt_for_an_unknown_sid_is_orphaned_after_the_wait_window(cfg, tenant, settings):
    settings.RECEIPT_PENDING_MAX_AGE_SECONDS = 60
    signed_post(callback("SM" + "f" * 32, "delivered"))
    ReceiptEvent.objects.update(
        received_at=timezone.now() - timedelta(seconds=61), next_try_at=timezone.now()
    )
    receipts_process_due()
    assert ReceiptEvent.objects.get().outcome == ReceiptOutcome.ORPHANED


# --- content types: each provider's callbacks arrive as its provider sends them ---------------------------


def _envelope_error(resp) -> dict:
    assert resp["Content-Type"].startswith("application/problem+json"), resp.content[:300]
    return resp.json()["error"]


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", None),  # the outside probe's case: it answered 200
        ("text/plain", "MessageSid=SM1&MessageStatus=delivered"),
        ("application/xml", "<MessageSid>SM1</MessageSid>"),
    ],
    ids=["json", "text", "xml"],
)
@pytest.mark.parametrize("path", ["/receipts/twilio/", "/inbound/twilio/"])
def test_a_twilio_callback_that_is_not_a_form_is_a_415_and_stores_nothing(cfg, path, content_type, body):
    tenant, _ = tenant_with_key()
    msg = sent_message(tenant, "SM" + "e" * 32)
    params = callback(msg.provider_message_id, "delivered")
    # Signed over the same fields as a form would be: the type alone is what is refused.
    signature = RequestValidator("receipt-test-token").compute_signature(PUBLIC + path, params)
    resp = Client().post(
        path,
        json.dumps(params) if body is None else body,
        content_type=content_type,
        HTTP_X_TWILIO_SIGNATURE=signature,
    )
    assert resp.status_code == 415, resp.content
    error = _envelope_error(resp)
    assert error["code"] == "unsupported_media_type"
    assert "application/x-www-form-urlencoded" in error["fields"]["Content-Type"][0]
    assert not ReceiptEvent.objects.exists()
    assert Message.objects.get(pk=msg.pk).status == Status.SENT


def test_a_signed_twilio_form_still_passes_the_content_type_gate(cfg):
    tenant, _ = tenant_with_key()
    msg = sent_message(tenant, "SM" + "f" * 32)
    assert signed_post(callback(msg.provider_message_id, "delivered")).status_code == 201


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", '{"messageId": "x", "status": "delivered"}'),
        ("application/x-www-form-urlencoded", "a=b"),
    ],
)
def test_vonage_receipts_may_be_json_or_a_form(content_type, body):
    # Both are methods of a Vonage account's receipt webhook (POST-JSON, POST): never a 415. What the
    # signature check answers is not this test's business.
    resp = Client().post("/receipts/vonage/", body, content_type=content_type)
    assert resp.status_code != 415, resp.content


def test_a_vonage_receipt_other_than_json_or_a_form_is_a_415():
    resp = Client().post("/receipts/vonage/", "<status>delivered</status>", content_type="application/xml")
    assert resp.status_code == 415 and _envelope_error(resp)["code"] == "unsupported_media_type"


def test_json_nested_past_the_recursion_limit_in_a_small_vonage_receipt_is_a_400_naming_body(settings):
    depth = 5000  # 10 kB: under the callback size cap, past json's recursion limit (a 500 before)
    text = '{"messageId": ' + "[" * depth + "]" * depth + "}"
    assert len(text) < settings.RECEIPT_MAX_BODY_BYTES
    resp = Client(raise_request_exception=False).post(
        "/receipts/vonage/", text, content_type="application/json"
    )
    assert resp.status_code == 400, resp.content
    assert "body" in _envelope_error(resp)["fields"]
    assert not ReceiptEvent.objects.exists()
