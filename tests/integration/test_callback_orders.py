"""Status callbacks in the orders Twilio really sends them, across real processes: the sandbox posts signed
callbacks to gunicorn's receipt endpoint, the `receipts` worker applies them.

* Messaging Service sends: ``accepted`` (the create answer), then callbacks ``queued`` (a sender was
  chosen), ``sent``, ``delivered``.
* A message Twilio fails (30008) gets ONE ``failed`` callback and no ``sent``; 30008 is transient, so the
  gateway sends it again until its retries are used up.
* SharedKey signatures (HMAC-SHA256, ``X-Twilio-Webhooks-Signature-Settings``): accepted with the
  configured key; a wrong secret is a 403 that writes nothing (and Twilio does not retry a 4xx).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections import Counter
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.utils import timezone

from delivery.models import Attempt, AttemptOutcome, DuplicateSubmission
from delivery.providers.twilio.sandbox.callbacks import SIGNATURE_SETTINGS_HEADER, twilio_signature
from receipts.models import ReceiptEvent, ReceiptOutcome
from scheduling.models import Message, MessageEvent, Status
from tests.factories import messages_bulk, tenant_with_key
from tests.harness import start_web

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
FINAL = (Status.DELIVERED, Status.UNDELIVERED, Status.FAILED)
SERVICE_SID = "MG" + "5e" * 16
SHARED_KEY_ID, SHARED_KEY_SECRET = "wk1", "the-secret"
FAST_CALLBACKS = {"callback_delay_ms": 100, "callback_gap_ms": 150}


def start_gateway(pipeline) -> None:
    connection.close()  # the workers are other processes; hold no connection they could wait on
    pipeline.worker()
    pipeline.beat()


def callbacks_settled(sandbox, posted: int) -> bool:
    """Every callback planned so far was posted (answered, refused or given up), ``posted`` in all."""
    stats = sandbox.stats()["callbacks"]
    return stats["pending"] == 0 and stats["sent"] + stats["failed"] + stats["dropped"] >= posted


def receipts_processed() -> bool:
    return not ReceiptEvent.objects.filter(processed_at__isnull=True).exists()


def receipt_entries(msg: Message, sids: list[str]) -> dict[str, list[MessageEvent]]:
    """The message's timeline entries caused by receipts for ``sids``, by provider status."""
    receipt_ids = list(ReceiptEvent.objects.filter(provider_message_id__in=sids).values_list("pk", flat=True))
    out: dict[str, list[MessageEvent]] = {}
    for event in MessageEvent.objects.filter(message=msg, details__receipt_id__in=receipt_ids).order_by("id"):
        out.setdefault(event.details["provider_status"], []).append(event)
    return out


def test_messaging_service_sends_get_queued_sent_delivered_callbacks_and_end_delivered(web):
    pipeline = web()
    sandbox = pipeline.sandbox
    # Spread the instants as Twilio does: accepted -> (sender chosen) queued -> (left the queue) sent ->
    # delivered, each posted 100 ms after it happens.
    sandbox.config(service_assign_delay_ms=300, queue_delay_ms=300, **FAST_CALLBACKS)
    tenant, _ = tenant_with_key("acme")
    pks = messages_bulk(tenant, 20, due_at=timezone.now())
    assert Message.objects.filter(pk__in=pks).update(from_number="", sender_pool=SERVICE_SID) == 20
    start_gateway(pipeline)
    pipeline.wait_all_final(pks, timeout=45, final=FINAL)
    pipeline.wait_until(lambda: callbacks_settled(sandbox, 3 * 20), 20, "every callback posted")
    pipeline.wait_until(receipts_processed, 20, "every receipt processed")

    stats = sandbox.stats()
    assert stats["submissions"] == 20 and stats["by_status"] == {"delivered": 20}
    assert stats["callbacks"]["sent"] == 60 and stats["callbacks"]["failed"] == 0
    msgs = list(Message.objects.filter(pk__in=pks))
    # Expected final state of every message: delivered, one accepted attempt, the service's sid.
    assert Counter(m.status for m in msgs) == {Status.DELIVERED: 20}
    for msg in msgs:
        sid = msg.provider_message_id
        assert sid and sid.startswith("SM")
        assert msg.provider_status == "delivered" and msg.delivered_at and msg.delivered_at >= msg.sent_at
        assert (msg.from_number, msg.sender_pool) == ("", SERVICE_SID)
        attempt = Attempt.objects.get(message=msg)
        assert (attempt.outcome, attempt.provider_message_id) == (AttemptOutcome.ACCEPTED, sid)
        assert attempt.response["status"] == "accepted", "a service send is answered `accepted`"
        info = sandbox.message_info(sid)
        assert info["initial_status"] == "accepted" and "From" not in info["form"]
        assert info["form"]["MessagingServiceSid"] == SERVICE_SID
        assert [s["status"] for s in info["timeline"]] == ["queued", "sent", "delivered"]

        receipts = ReceiptEvent.objects.filter(provider_message_id=sid)
        assert sorted(receipts.values_list("raw_status", flat=True)) == ["delivered", "queued", "sent"]
        assert set(receipts.values_list("message_id", flat=True)) == {msg.pk}
        assert set(receipts.values_list("message_hint", flat=True)) == {msg.public_id.removeprefix("msg_")}
        entries = receipt_entries(msg, [sid])
        assert sorted(entries) == ["delivered", "queued", "sent"], (msg.public_id, entries)
        assert all(len(e) == 1 for e in entries.values()), "one timeline entry per provider status"
        # `queued` is informational and `sent` was already recorded by the worker from the create answer:
        # both are notes (no status change). The note's wording depends on what shared its batch.
        for status in ("queued", "sent"):
            note = entries[status][0]
            assert note.kind == "receipt" and note.from_status == note.to_status
            assert note.to_status in (Status.SENT, Status.DELIVERED)  # what the message was at by then
            assert note.details["note"] in ("informational status", "already at or past this status")
        delivered = entries["delivered"][0]
        assert (delivered.kind, delivered.from_status, delivered.to_status) == (
            "delivered",
            Status.SENT,
            Status.DELIVERED,
        )
    assert set(ReceiptEvent.objects.values_list("outcome", flat=True)) == {
        ReceiptOutcome.RECORDED,
        ReceiptOutcome.APPLIED,
    }
    assert ReceiptEvent.objects.filter(outcome=ReceiptOutcome.APPLIED).count() == 20
    assert not DuplicateSubmission.objects.exists()


def test_failed_without_sent_is_retried_then_ends_failed_after_max_attempts(web):
    pipeline = web(SMSGW_RETRY_MAX_ATTEMPTS="2")
    sandbox = pipeline.sandbox
    sandbox.config(callback_failed_share=1.0, **FAST_CALLBACKS)
    tenant, _ = tenant_with_key("acme")
    n = 15
    pks = messages_bulk(tenant, n, due_at=timezone.now())
    start_gateway(pipeline)
    pipeline.wait_all_final(pks, timeout=50, final=FINAL)
    pipeline.wait_until(lambda: callbacks_settled(sandbox, 2 * n), 20, "every callback posted")
    pipeline.wait_until(receipts_processed, 20, "every receipt processed")

    stats = sandbox.stats()
    # two submissions per message, every one failed by the provider, one `failed` callback each
    assert stats["submissions"] == 2 * n and stats["by_status"] == {"failed": 2 * n}
    assert stats["callbacks"]["sent"] == 2 * n and stats["callbacks"]["failed"] == 0
    provider = {m.sid: m for m in sandbox.list_messages()}
    msgs = list(Message.objects.filter(pk__in=pks))
    assert Counter(m.status for m in msgs) == {Status.FAILED: n}
    problems = []
    for msg in msgs:
        assert (msg.status, msg.error_code) == (Status.FAILED, "30008"), msg.public_id
        assert msg.failed_at and msg.attempt_count == 2
        attempts = list(Attempt.objects.filter(message=msg).order_by("number"))
        assert [a.number for a in attempts] == [1, 2]
        sids = [a.provider_message_id for a in attempts]
        assert len(set(sids)) == 2 and all(sids), sids
        assert msg.provider_message_id == sids[1]
        at_sandbox = [m for m in provider.values() if m.to == msg.to]
        assert sorted(m.sid for m in at_sandbox) == sorted(sids)
        assert all((m.status, m.error_code) == ("failed", 30008) for m in at_sandbox)
        receipts = ReceiptEvent.objects.filter(provider_message_id__in=sids)
        assert sorted(receipts.values_list("provider_message_id", "raw_status")) == sorted(
            (sid, "failed") for sid in sids
        ), "Twilio's order: one `failed`, never a `sent`"
        assert set(receipts.values_list("error_code", flat=True)) == {"30008"}
        kinds = list(MessageEvent.objects.filter(message=msg).order_by("id").values_list("kind", flat=True))
        assert kinds.count("retry_scheduled") == 1 and kinds[-1] == "failed", kinds
        assert kinds.count("sent") == 2, kinds  # each accepted submission, never a `sent` callback
        outcomes = [a.outcome for a in attempts]
        if outcomes != [AttemptOutcome.REJECTED, AttemptOutcome.REJECTED]:
            problems.append((msg.public_id, outcomes))
    assert not ReceiptEvent.objects.filter(raw_status="sent").exists()
    assert not DuplicateSubmission.objects.exists()
    # both attempts were failed by the provider (30008): the attempt history must say so
    assert not problems, f"attempt outcomes other than [rejected, rejected]: {problems[:3]} ({len(problems)})"


def test_shared_key_signed_callbacks_are_accepted(web):
    pipeline = web(TWILIO_WEBHOOK_SHARED_KEYS=f"{SHARED_KEY_ID}:{SHARED_KEY_SECRET}")
    sandbox = pipeline.sandbox
    sandbox.config(
        callback_shared_key_id=SHARED_KEY_ID, callback_shared_key_secret=SHARED_KEY_SECRET, **FAST_CALLBACKS
    )
    tenant, _ = tenant_with_key("acme")
    n = 15
    pks = messages_bulk(tenant, n, due_at=timezone.now())
    start_gateway(pipeline)
    pipeline.wait_all_final(pks, timeout=45, final=FINAL)
    pipeline.wait_until(lambda: callbacks_settled(sandbox, 2 * n), 20, "every callback posted")
    pipeline.wait_until(receipts_processed, 20, "every receipt processed")

    assert Counter(Message.objects.filter(pk__in=pks).values_list("status", flat=True)) == {
        Status.DELIVERED: n
    }
    stats = sandbox.stats()["callbacks"]
    assert (stats["sent"], stats["failed"], stats["retries"]) == (2 * n, 0, 0)
    assert Counter(ReceiptEvent.objects.values_list("raw_status", flat=True)) == {"sent": n, "delivered": n}
    for msg in Message.objects.filter(pk__in=pks):
        assert set(
            ReceiptEvent.objects.filter(provider_message_id=msg.provider_message_id).values_list(
                "raw_status", flat=True
            )
        ) == {"sent", "delivered"}


def test_callbacks_signed_with_a_wrong_shared_key_secret_are_refused_and_change_nothing(web):
    pipeline = web(TWILIO_WEBHOOK_SHARED_KEYS=f"{SHARED_KEY_ID}:{SHARED_KEY_SECRET}")
    base = pipeline.env["SMSGW_PUBLIC_BASE_URL"]
    sandbox = pipeline.sandbox
    sandbox.config(
        callback_shared_key_id=SHARED_KEY_ID, callback_shared_key_secret="not-the-secret", **FAST_CALLBACKS
    )
    tenant, _ = tenant_with_key("acme")
    n = 15
    pks = messages_bulk(tenant, n, due_at=timezone.now())
    start_gateway(pipeline)
    pipeline.wait_all_final(pks, timeout=45, final=(Status.SENT, *FINAL))
    # each message's `sent` and `delivered` callbacks are posted once each and refused
    pipeline.wait_until(lambda: callbacks_settled(sandbox, 2 * n), 20, "every callback posted")

    stats = sandbox.stats()
    assert stats["by_status"] == {"delivered": n}, "the provider delivered them; the gateway never heard"
    callbacks = stats["callbacks"]
    # Twilio's default retry policy (rp=ct) does not retry an HTTP answer: one attempt per callback
    assert (callbacks["sent"], callbacks["failed"], callbacks["attempts"], callbacks["retries"]) == (
        0,
        2 * n,
        2 * n,
        0,
    )
    assert not ReceiptEvent.objects.exists(), "a refused callback writes nothing"
    msgs = list(Message.objects.filter(pk__in=pks))
    assert Counter(m.status for m in msgs) == {Status.SENT: n}
    for msg in msgs:
        assert msg.delivered_at is None and msg.provider_status == "queued"

    # The refusal is a 403: the same callback, signed with the wrong secret, posted directly.
    msg = msgs[0]
    sid = msg.provider_message_id
    url = sandbox.message_info(sid)["status_callback"]
    assert url == f"{base}/receipts/twilio/?m={msg.public_id.removeprefix('msg_')}&a=1"
    params = {
        "AccountSid": sandbox.account_sid,
        "ApiVersion": "2010-04-01",
        "MessageSid": sid,
        "MessageStatus": "delivered",
        "SmsSid": sid,
        "SmsStatus": "delivered",
        "To": msg.to,
        "From": msg.from_number,
    }
    for secret, expected in (("not-the-secret", 403), (SHARED_KEY_SECRET, 201)):
        request = urllib.request.Request(
            url,
            data=urlencode(params).encode(),
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "X-Twilio-Signature": twilio_signature(secret, url, params, "HMAC_SHA256"),
                SIGNATURE_SETTINGS_HEADER: f"key={SHARED_KEY_ID},algorithm=HMAC_SHA256",
            },
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        assert status == expected, secret
        if expected == 403:
            assert not ReceiptEvent.objects.exists()
    # and the correctly signed copy is taken: the endpoint was not refusing everything
    assert list(ReceiptEvent.objects.values_list("provider_message_id", "raw_status")) == [
        (msg.provider_message_id, "delivered")
    ]


@pytest.fixture
def web(pipeline):
    """``web(**env)``: start gunicorn for the pipeline (see ``start_web``) and return the pipeline."""

    def make(**env: str):
        start_web(pipeline, **env)
        return pipeline

    return make
