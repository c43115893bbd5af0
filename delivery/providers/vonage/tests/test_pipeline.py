"""Vonage across real processes: celery workers and beat, gunicorn for the receipts, PostgreSQL and
Redis, and the Vonage sandbox as a real HTTPS server (its throwaway trustme CA) with requests and
receipts signed by a shared secret (SMSGW_PROVIDER=vonage). Each test states the final state of every
message and counts, at the sandbox, what Vonage holds for it (docs/vonage.md: the error table, "Uncertain
Vonage submissions", the sandbox's faults)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from delivery.models import Attempt, AttemptOutcome, DuplicateSubmission, ProviderHold
from receipts.models import ReceiptEvent, ReceiptOutcome
from scheduling.lifecycle.reasons import ReasonCode
from scheduling.models import Message, MessageEvent, Status
from tests.factories import message, messages_bulk, recipient, tenant_with_key
from tests.harness import Pipeline, start_web
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
FINAL = (Status.DELIVERED, Status.UNDELIVERED, Status.FAILED, Status.EXPIRED, Status.CANCELLED)


@pytest.fixture
def vonage(provider_pipeline, settings) -> Pipeline:
    # Messages are born with the deployment's provider (scheduling.models): this process's too.
    settings.SMSGW_PROVIDER = "vonage"
    # Receipts at once (the sandbox's 500 ms default would only slow the tests down).
    pipeline = provider_pipeline("vonage")
    pipeline.sandbox.config(callback_delay_ms=0, callback_gap_ms=50)
    warm(start_web(pipeline))
    return pipeline


def _refused_receipt(base: str) -> float:
    """Seconds a signed-looking receipt with a wrong ``sig`` takes to be refused (403): the first request
    to a gunicorn worker loads the application and the SDK's signature check."""
    body = json.dumps({"messageId": "0", "status": "delivered", "timestamp": "1", "sig": "0" * 64}).encode()
    request = urllib.request.Request(
        base + "/receipts/vonage/", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    started = time.monotonic()
    try:
        urllib.request.urlopen(request, timeout=30)
    except urllib.error.HTTPError as exc:
        assert exc.code == 403, exc.code
    return time.monotonic() - started


def warm(base: str) -> None:
    """Every web worker has loaded the application before the first receipt: a cold one takes seconds,
    past the sandbox's receipt read timeout (callback_timeout_ms), and Vonage's receipts would be counted
    failed at the sandbox although stored here."""
    with ThreadPoolExecutor(4) as pool:
        wait_for(
            lambda: max(pool.map(lambda _: _refused_receipt(base), range(4))) < 0.5,
            60,
            "the web workers warm",
        )


def run(pipeline: Pipeline) -> None:
    connection.close()  # workers are separate processes; do not hold a connection they could wait on
    pipeline.worker()
    pipeline.beat()


def ref(msg: Message) -> str:
    """Our message reference in Vonage's client-ref ("<ref>.<attempt>", adapter.client_ref)."""
    return msg.public_id.removeprefix("msg_")


def receipts_settled(pipeline: Pipeline) -> bool:
    return (
        pipeline.sandbox.stats()["callbacks"]["pending"] == 0
        and not ReceiptEvent.objects.filter(processed_at__isnull=True).exists()
    )


def delivered_once_each(pipeline: Pipeline, pks: list[int]) -> dict[str, list[dict]]:
    """Every message delivered; the sandbox holds exactly one submission of each (all its parts from one
    request), under the client-ref of the attempt that the message records, its first part's
    message-id the message's provider id; no duplicate recorded. Returns the stored parts by message."""
    pipeline.wait_until(lambda: receipts_settled(pipeline), 30, "receipts out and processed")
    msgs = list(Message.objects.filter(pk__in=pks))
    assert Counter(m.status for m in msgs) == {Status.DELIVERED: len(pks)}
    stored = pipeline.sandbox.messages()
    by_message: dict[str, list[dict]] = {}
    for part in stored:
        by_message.setdefault(part["client-ref"].split(".")[0], []).append(part)
    for m in msgs:
        parts = by_message.get(ref(m), [])
        assert parts, f"{m.public_id} is not at the sandbox"
        requests = {p["request_id"] for p in parts}
        assert len(requests) == 1, f"{m.public_id} was submitted {len(requests)} times"
        first = min(parts, key=lambda p: p["part"])
        assert first["message-id"] == m.provider_message_id
        assert first["to"] == m.to.lstrip("+")
        assert m.delivered_at is not None and m.sent_at is not None
        # the client-ref names the attempt the message records as accepted
        accepted = Attempt.objects.get(message=m, provider_message_id=m.provider_message_id)
        assert {p["client-ref"] for p in parts} == {f"{ref(m)}.{accepted.number}"}
    assert not DuplicateSubmission.objects.filter(message_id__in=pks).exists()
    return by_message


def test_plain_send_delivered_once_each_by_signed_receipts_with_client_ref_echoed(vonage):
    """50 messages through Vonage: each submitted once (counted at the sandbox), each delivered by a
    receipt signed with the shared secret that echoes our client-ref; an unsigned receipt is refused."""
    tenant, _ = tenant_with_key("acme")
    pks = messages_bulk(tenant, 50, due_at=timezone.now())
    run(vonage)
    vonage.wait_all_final(pks, timeout=60, final=FINAL)
    by_message = delivered_once_each(vonage, pks)
    assert vonage.sandbox.stats()["submissions"] == 50
    assert vonage.sandbox.stats()["callbacks"]["failed"] == 0
    for m in Message.objects.filter(pk__in=pks):
        assert Attempt.objects.filter(message=m).count() == 1
        (part,) = by_message[ref(m)]
        # the request was signed (no api_secret sent) and carried our receipts URL with its hints
        assert "sig" in part["form"] and "api_secret" not in part["form"]
        assert part["callback"].endswith(f"/receipts/vonage/?m={ref(m)}&a=1")
        receipt = ReceiptEvent.objects.get(provider_message_id=m.provider_message_id)
        assert receipt.outcome == ReceiptOutcome.APPLIED and receipt.message_id == m.pk
        assert receipt.raw_status == "delivered"
        assert receipt.payload["client-ref"] == f"{ref(m)}.1"  # echoed by Vonage
        assert "sig" not in receipt.payload  # verified, then dropped (callbacks.redact)
        kinds = list(MessageEvent.objects.filter(message=m).order_by("id").values_list("kind", flat=True))
        assert kinds[-1] == "delivered", kinds

    # A receipt without the signature is refused and changes nothing.
    m = Message.objects.get(pk=pks[0])
    body = json.dumps(
        {"messageId": m.provider_message_id, "status": "failed", "err-code": "8", "client-ref": f"{ref(m)}.1"}
    ).encode()
    request = urllib.request.Request(
        vonage.env["SMSGW_PUBLIC_BASE_URL"] + "/receipts/vonage/",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert 400 <= refused.value.code < 500
    m.refresh_from_db()
    assert m.status == Status.DELIVERED


def test_throttled_requests_are_sent_again_later_none_failed_none_twice(vonage):
    """A third of the requests answered status 1 (throttled: refused for the rate, nothing queued): each
    such message is sent again after a backoff, uncharged, until it is taken once."""
    vonage.sandbox.config(throttled_rate=0.35)
    tenant, _ = tenant_with_key("acme")
    pks = messages_bulk(tenant, 40, due_at=timezone.now())
    run(vonage)
    vonage.wait_all_final(pks, timeout=60, final=FINAL)
    delivered_once_each(vonage, pks)
    stats = vonage.sandbox.stats()
    assert stats["rejections"].get("1", 0) >= 5, stats["rejections"]  # the scenario happened
    assert set(stats["rejections"]) == {"1"}
    assert stats["submissions"] == 40
    throttled = Attempt.objects.filter(message_id__in=pks, provider_code="1")
    assert throttled.count() == stats["rejections"]["1"]
    assert set(throttled.values_list("outcome", flat=True)) == {AttemptOutcome.THROTTLED}
    # a throttle is not charged: every message still has its whole retry budget
    assert set(Message.objects.filter(pk__in=pks).values_list("attempt_count", flat=True)) <= {0, 1}


def _hold_then_recover(
    pipeline: Pipeline, pks: list[int], error_code: str, recover, *, taken_before: int = 0
) -> int:
    """An account fault: the account is held (a ProviderHold), every message waits in `queued`, none
    fails; once the sandbox takes the account again, every message is delivered once. ``taken_before``
    messages the provider took before the fault may be delivered meanwhile (their receipts do not wait for
    the hold). Returns how many messages met the hold (refused with ``error_code``, or parked on it)."""
    run(pipeline)
    pipeline.wait_until(
        lambda: ProviderHold.objects.filter(provider="vonage", error_code=error_code).exists(),
        30,
        f"an account hold for status {error_code}",
    )
    hold = ProviderHold.objects.filter(provider="vonage", error_code=error_code).earliest("opened_at")
    assert hold.scope == "account" and hold.account == pipeline.sandbox.api_key
    # Held, not failed: a few seconds of the fault (probes included) end no message.
    pipeline.wait_until(
        lambda: (
            Message.objects.filter(pk__in=pks, reason_code=ReasonCode.PROVIDER_HOLD).count() >= len(pks) // 2
        ),
        30,
        "the messages parked on the hold",
    )
    ended = Message.objects.filter(pk__in=pks, status__in=FINAL)
    assert not ended.exclude(status=Status.DELIVERED).exists()
    assert ended.count() <= taken_before
    recover()
    pipeline.wait_all_final(pks, timeout=60, final=FINAL)
    delivered_once_each(pipeline, pks)
    assert not ProviderHold.objects.filter(provider="vonage", cleared_at__isnull=True).exists()
    met = 0
    for m in Message.objects.filter(pk__in=pks):
        assert m.attempt_count <= 1  # an account fault is not the message's: its attempts were not charged
        met += (
            MessageEvent.objects.filter(message=m, kind="held").exists()
            or Attempt.objects.filter(message=m, provider_code=error_code).exists()
        )
    return met


def test_invalid_credentials_hold_the_account_none_failed_delivered_once_after(vonage):
    """Status 4 (invalid credentials: an account fault, docs/vonage.md): the account is held, nothing is
    failed; when the sandbox takes the credentials again, every message is delivered once."""
    vonage.sandbox.config(auth_fail=True)
    tenant, _ = tenant_with_key("acme")
    pks = messages_bulk(tenant, 20, due_at=timezone.now())
    assert _hold_then_recover(vonage, pks, "4", lambda: vonage.sandbox.config(auth_fail=False)) == len(pks)
    assert vonage.sandbox.stats()["rejections"].get("4", 0) >= 1


def test_insufficient_credit_holds_the_account_none_failed_delivered_once_after_top_up(vonage):
    """Status 9 (partner quota violation, "Top-up and retry": an account fault, docs/vonage.md): the
    balance runs out after 3 messages; the account is held, nothing fails; a top-up and every message is
    delivered once."""
    vonage.sandbox.config(balance=0.1, price_per_part=0.0333)  # 3 parts' worth
    tenant, _ = tenant_with_key("acme")
    pks = messages_bulk(tenant, 20, due_at=timezone.now())
    met = _hold_then_recover(vonage, pks, "9", lambda: vonage.sandbox.config(balance=1000), taken_before=3)
    assert met >= len(pks) - 3  # the first 3 went through on the balance there was
    assert vonage.sandbox.stats()["rejections"].get("9", 0) >= 1


def test_uncertain_submissions_resolved_by_their_receipts_never_resent_blind(vonage):
    """docs/vonage.md, "Uncertain Vonage submissions": Vonage has no list or fetch, so an uncertain
    submission is resolved only by a receipt carrying its client-ref / callback hints, and is never sent
    again blind. Stored then HTTP 500, stored then 503, stored then the connection dropped: each is
    found by its receipt and delivered, submitted once. Status 5 (internal error) and an HTTP 500 with
    nothing stored: no receipt can come; the message ends `failed` (uncertain_expired) at its validity,
    never submitted again."""
    tenant, _ = tenant_with_key("acme")
    stored_actions = ["store_then_500", "store_then_503", "store_then_drop"]
    lost = [recipient(900), recipient(901)]
    rules = [{"to": recipient(i).lstrip("+"), "action": a, "times": 1} for i, a in enumerate(stored_actions)]
    rules += [
        {"to": lost[0].lstrip("+"), "action": "status", "status": 5},
        {"to": lost[1].lstrip("+"), "action": "500"},
    ]
    vonage.sandbox.config(rules=rules)
    found = [message(tenant, to=recipient(i)).pk for i in range(len(stored_actions))]
    plain = [message(tenant, to=recipient(100 + i)).pk for i in range(5)]
    run(vonage)
    # Vonage's shortest ttl is 20 s (config.VALIDITY), and a message is released only while that much of
    # its validity is left: created once the workers are up, the lost ones go out at once and their
    # validity ends within the test.
    never = [message(tenant, to=to, validity=30).pk for to in lost]
    connection.close()
    vonage.wait_all_final(found + plain + never, timeout=60, final=FINAL)
    delivered_once_each(vonage, found + plain)
    for pk in found:
        m = Message.objects.get(pk=pk)
        (attempt,) = Attempt.objects.filter(message=m)
        assert attempt.outcome != AttemptOutcome.PENDING
        kinds = set(MessageEvent.objects.filter(message=m).values_list("kind", flat=True))
        assert "reconciled_found" in kinds, kinds
        found_entry = MessageEvent.objects.filter(message=m, kind="reconciled_found").get()
        assert found_entry.details["source"] == "receipt"
    for pk in never:
        m = Message.objects.get(pk=pk)
        timeline = list(MessageEvent.objects.filter(message=m).values_list("kind", "details"))
        assert m.status == Status.FAILED and m.reason_code == ReasonCode.UNCERTAIN_EXPIRED, timeline
        (attempt,) = Attempt.objects.filter(message=m)  # one request, never a second
        assert attempt.outcome == AttemptOutcome.UNCERTAIN
        assert m.failed_at >= m.expires_at - timedelta(seconds=1)
        assert not vonage.sandbox.messages(to=m.to.lstrip("+"))  # nothing stored: it was never sent
    stats = vonage.sandbox.stats()
    assert stats["by_outcome"]["rejected"] == 1 and stats["by_outcome"]["error_500"] == 1, stats["by_outcome"]


LONG_BODY = ("Your appointment is confirmed; reply to this number to change it. " * 7)[:400]  # 3 parts of 153


def test_long_message_three_part_ids_three_receipts_delivered_when_every_part_is(vonage):
    """A 400-character text is 3 parts at Vonage (153 GSM-7 characters each): one request, three
    message-ids, three receipts. The message is `delivered` once every part is (the timeline names each
    part's receipt); a message whose parts are refused by the carrier ends `failed` and is never sent
    again, even for a code that would resend a one-part message (8, network error: the other parts were
    handed on)."""
    tenant, _ = tenant_with_key("acme")
    run(vonage)
    whole = message(tenant, to=recipient(1), body=LONG_BODY)
    Message.objects.filter(pk=whole.pk).update(segments=3)
    connection.close()
    vonage.wait_all_final([whole.pk], timeout=30, final=FINAL)
    delivered_once_each(vonage, [whole.pk])
    whole.refresh_from_db()
    parts = sorted(vonage.sandbox.messages(to=whole.to.lstrip("+")), key=lambda p: p["part"])
    assert [(p["part"], p["parts"]) for p in parts] == [(1, 3), (2, 3), (3, 3)]
    assert "".join(p["text"] for p in parts) == LONG_BODY
    assert len({p["request_id"] for p in parts}) == 1
    (attempt,) = Attempt.objects.filter(message=whole)
    assert attempt.response["part_ids"] == [p["message-id"] for p in parts]
    receipts = ReceiptEvent.objects.filter(message_id=whole.pk)
    assert sorted(receipts.values_list("provider_message_id", flat=True)) == sorted(
        attempt.response["part_ids"]
    )
    assert set(receipts.values_list("outcome", flat=True)) <= {
        ReceiptOutcome.APPLIED,
        ReceiptOutcome.RECORDED,
    }
    assert receipts.filter(outcome=ReceiptOutcome.APPLIED).count() == 1
    # the timeline: one entry per part; the receipt that completes the set delivers it, the others are
    # noted (waiting for the other parts, or after the move when they came in the same batch)
    entries = MessageEvent.objects.filter(message=whole, details__receipt_id__isnull=False).order_by("id")
    assert sorted(e.details["part"] for e in entries) == [1, 2, 3]
    assert all(e.details["parts"] == 3 for e in entries)
    assert sorted(e.kind for e in entries) == ["delivered", "receipt", "receipt"]
    notes = [e.details["note"] for e in entries if e.kind == "receipt"]
    assert all("every part" in n or "already" in n for n in notes), notes
    assert not DuplicateSubmission.objects.exists()

    # Every part refused by the carrier (rejected, err-code 8: a transient class, which would send a
    # one-part message again): the long message ends failed, submitted once.
    vonage.sandbox.config(receipt_rejected_share=1.0, receipt_rejected_err_code=8)
    refused = message(tenant, to=recipient(2), body=LONG_BODY)
    connection.close()
    vonage.wait_all_final([refused.pk], timeout=30, final=FINAL)
    vonage.wait_until(lambda: receipts_settled(vonage), 30, "receipts out and processed")
    refused.refresh_from_db()
    assert refused.status == Status.FAILED, refused.status_reason
    assert refused.error_code == "8"
    assert Attempt.objects.filter(message=refused).count() == 1
    stored = vonage.sandbox.messages(to=refused.to.lstrip("+"))
    assert len(stored) == 3 and len({p["request_id"] for p in stored}) == 1  # never sent again
    assert ReceiptEvent.objects.filter(message_id=refused.pk).count() == 3
    assert not DuplicateSubmission.objects.exists()
