"""The return path across real processes: sandbox callbacks (Twilio-signed) -> gunicorn receipt endpoint
-> `receipts` queue worker -> status processor, plus reconciliation after a worker is killed mid-call."""

from __future__ import annotations

from collections import Counter

import pytest
from django.db import connection
from django.utils import timezone

from delivery.models import Attempt, AttemptOutcome, DuplicateSubmission
from receipts.models import ReceiptEvent, ReceiptOutcome
from scheduling.models import Message, MessageEvent, Status
from tests.factories import messages_bulk, recipient, tenant_with_key
from tests.harness import start_web
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
FINAL = (Status.DELIVERED, Status.UNDELIVERED, Status.FAILED)


@pytest.fixture
def with_web(pipeline):
    start_web(pipeline)
    return pipeline


def callbacks_settled(sandbox) -> bool:
    return sandbox.stats()["callbacks"]["pending"] == 0


def test_callbacks_three_times_shuffled_end_in_the_furthest_state_one_entry_per_status(with_web):
    pipeline = with_web
    pipeline.sandbox.config(
        callback_delay_ms=0,
        callback_gap_ms=0,
        callback_repeat=3,
        callback_shuffle=True,
        callback_undelivered_share=0.2,
        callback_failed_share=0.1,
    )
    tenant, _ = tenant_with_key("acme")
    pks = messages_bulk(tenant, 60, due_at=timezone.now())
    connection.close()
    pipeline.worker()
    pipeline.beat()
    pipeline.wait_all_final(pks, timeout=90, final=FINAL)
    pipeline.wait_until(lambda: callbacks_settled(pipeline.sandbox), 30, "callbacks out")
    # Every callback the sandbox sent has been stored and processed, duplicates included.
    pipeline.wait_until(
        lambda: not ReceiptEvent.objects.filter(processed_at__isnull=True).exists(), 30, "receipts processed"
    )

    provider = {m.sid: m.status for m in pipeline.sandbox.list_messages()}
    for msg in Message.objects.filter(pk__in=pks):
        final = provider[msg.provider_message_id]
        assert msg.status == final, msg.public_id
        receipts = ReceiptEvent.objects.filter(provider_message_id=msg.provider_message_id)
        entries = MessageEvent.objects.filter(
            message=msg, details__receipt_id__in=list(receipts.values_list("pk", flat=True))
        )
        statuses = sorted(e.details["provider_status"] for e in entries)
        # Twilio's order: a failed message gets `failed` alone, never `sent` first
        expected = ["failed"] if final == "failed" else ["sent", final]
        assert statuses == sorted(expected), (msg.public_id, statuses)
        if msg.status == Status.DELIVERED:
            assert msg.delivered_at and msg.delivered_at >= msg.sent_at
        else:
            assert msg.error_code in ("30003", "30008")
        # A `failed` (30008, "unknown error": transient) at the provider was sent again: every earlier
        # sid of the message is one the provider failed, and its receipts were kept as superseded.
        earlier = Attempt.objects.filter(message=msg).exclude(
            provider_message_id__in=["", msg.provider_message_id]
        )
        for attempt in earlier:
            assert provider[attempt.provider_message_id] == "failed"
            assert attempt.outcome == AttemptOutcome.REJECTED
    assert not ReceiptEvent.objects.filter(processed_at__isnull=True).exists()
    # 3 copies of each callback posted, each distinct one stored once: `failed` alone, or `sent` + final
    assert ReceiptEvent.objects.count() == sum(1 if st == "failed" else 2 for st in provider.values())
    assert pipeline.sandbox.stats()["callbacks"]["failed"] == 0
    assert not DuplicateSubmission.objects.exists()


def test_callback_that_arrives_before_the_submit_response_is_applied(with_web):
    pipeline = with_web
    # The sandbox waits for our answer to the early callback before it answers the create (up to the
    # callback timeout): a long timeout keeps "received before the worker stored the sid" true on a loaded
    # machine, where the web process may take seconds to answer.
    pipeline.sandbox.config(
        callback_delay_ms=0, callback_gap_ms=300, callback_early_rate=1.0, callback_timeout_ms=60_000
    )
    # And the worker waits for the create's answer longer than the sandbox waits for the callback's: with the
    # pipeline's 2-s provider timeout, a web process slow to answer (its first requests, on a loaded machine)
    # made every create time out, the reconciler then recorded each message as sent at the provider's
    # creation time (before the callback arrived), and the scenario never happened. The sending lease outlasts
    # the timeout, as the settings require.
    pipeline.env.update(TWILIO_TIMEOUT_SECONDS="75", SMSGW_SENDING_LEASE_SECONDS="90")
    tenant, _ = tenant_with_key("acme")
    pks = messages_bulk(tenant, 20, due_at=timezone.now())
    connection.close()
    pipeline.worker()
    pipeline.beat()
    pipeline.wait_all_final(pks, timeout=90, final=FINAL)
    pipeline.wait_until(
        lambda: not ReceiptEvent.objects.filter(processed_at__isnull=True).exists(), 30, "receipts processed"
    )
    assert Counter(Message.objects.filter(pk__in=pks).values_list("status", flat=True)) == {
        Status.DELIVERED: 20
    }
    early = ReceiptEvent.objects.filter(raw_status="sent")
    assert early.count() == 20
    assert set(early.values_list("outcome", flat=True)) <= {ReceiptOutcome.RECORDED, ReceiptOutcome.APPLIED}
    came_first = 0
    for receipt in early:
        assert receipt.message_id is not None
        sent_at = Message.objects.get(pk=receipt.message_id).sent_at
        came_first += receipt.received_at <= sent_at
    # The scenario happened: callbacks received before the worker stored the provider id. On a loaded
    # machine the web process may answer one so late that the sandbox gives up waiting and answers the
    # create first; every one of them is applied either way (asserted above).
    assert came_first >= 1, "no callback arrived before the submit response: the scenario did not happen"


def test_worker_killed_after_provider_accepted_before_sid_stored_submits_once(pipeline):
    tenant, _ = tenant_with_key("acme")
    to = recipient(42)
    # The sandbox stores the message, then hangs instead of answering: the worker holds an accepted
    # submission whose sid it has not seen when it is killed.
    pipeline.sandbox.config(
        rules=[{"to": to, "action": "accept_then_hang", "times": 1}], timeout_hang_seconds=60
    )
    # Long enough to kill the worker while it waits (the lease must stay longer than the timeout).
    pipeline.env["TWILIO_TIMEOUT_SECONDS"] = "3.5"
    pks = messages_bulk(tenant, 1, due_at=timezone.now())
    Message.objects.filter(pk=pks[0]).update(to=to)
    connection.close()
    victim = pipeline.worker("victim")
    pipeline.beat()
    pipeline.wait_until(lambda: len(pipeline.sandbox.list_messages(to=to)) == 1, 30, "the sandbox to accept")
    # stored at the provider, its answer held back: the worker waits for it without a sid
    msg = Message.objects.get(pk=pks[0])
    assert msg.status == Status.SENDING and msg.provider_message_id is None
    victim.kill9()
    pipeline.env["TWILIO_TIMEOUT_SECONDS"] = "2"
    pipeline.worker("rescuer")
    pipeline.wait_all_final(pks, timeout=60)

    msg.refresh_from_db()
    stored = pipeline.sandbox.list_messages(to=to)
    assert (
        len(stored) == 1
        and msg.status in (Status.SENT, Status.DELIVERED)
        and msg.provider_message_id == stored[0].sid
    )
    assert list(Attempt.objects.filter(message=msg).values_list("outcome", flat=True)) == [
        AttemptOutcome.RECONCILED_FOUND
    ]
    assert MessageEvent.objects.filter(message=msg, kind="reconciled_found").count() == 1


def _post_callback(base: str, token: str, params: dict) -> int:
    import urllib.error
    import urllib.parse
    import urllib.request

    from twilio.request_validator import RequestValidator

    url = f"{base}/receipts/twilio/"
    signature = RequestValidator(token).compute_signature(url, params)
    req = urllib.request.Request(
        url, data=urllib.parse.urlencode(params).encode(), headers={"X-Twilio-Signature": signature}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _status_params(sid: str, status: str, error_code: str = "") -> dict:
    return {
        "MessageSid": sid,
        "MessageStatus": status,
        "AccountSid": "AC" + "0" * 32,
        "From": "+14155550100",
        "To": "+14155550123",
        "ApiVersion": "2010-04-01",
        **({"ErrorCode": error_code} if error_code else {}),
    }


def test_database_outage_receipts_spooled_answered_2xx_and_applied_once_when_back(pipeline, tmp_path):
    """The web process reaches PostgreSQL through a proxy the test cuts: signed callbacks are still
    answered 201 (spooled on disk), wrongly signed ones 403; once the database is back every message
    reaches the final status its callback said, exactly once, with the time it arrived."""
    from tests.integration.db_proxy import DatabaseProxy
    from tests.receipts.test_receipts import sent_message

    if connection.vendor != "postgresql":
        pytest.skip("the outage is a TCP proxy in front of PostgreSQL")
    db = connection.settings_dict
    proxy = DatabaseProxy((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)))
    spool_dir = tmp_path / "spool"
    pipeline.env["SMSGW_RECEIPT_SPOOL_DIR"] = str(spool_dir)
    web_db = f"postgres://{db['USER'] or 'postgres'}@127.0.0.1:{proxy.port}/{db['NAME']}"
    base = start_web(pipeline, web_only={"DATABASE_URL": web_db})
    token = pipeline.sandbox.auth_token
    tenant, _ = tenant_with_key("acme")
    msgs = [sent_message(tenant, f"SM{i:032x}") for i in range(1, 22)]
    warm, outage = msgs[0], msgs[1:]
    expected = {m.pk: (Status.DELIVERED if i % 3 else Status.UNDELIVERED) for i, m in enumerate(outage)}
    connection.close()
    try:
        # Before the outage: stored directly (the web workers now hold connections that will break).
        assert _post_callback(base, token, _status_params(warm.provider_message_id, "delivered")) == 201
        assert ReceiptEvent.objects.filter(provider_message_id=warm.provider_message_id).exists()
        connection.close()

        proxy.down()
        outage_started = timezone.now()
        posted = []
        for m in outage:
            if expected[m.pk] == Status.DELIVERED:
                params = _status_params(m.provider_message_id, "delivered")
            else:
                params = _status_params(m.provider_message_id, "undelivered", "30003")
            assert _post_callback(base, token, params) == 201, m.provider_message_id
            posted.append(params)
        # a copy of one callback (a provider retry): spooled twice, stored once
        assert _post_callback(base, token, posted[0]) == 201
        # wrongly signed: refused as ever, nothing spooled
        assert (
            _post_callback(base, "the-wrong-token", _status_params(outage[1].provider_message_id, "failed"))
            == 403
        )
        spooled = sorted(p.name for p in spool_dir.glob("*.json"))
        assert len(spooled) == len(outage) + 1
        outage_ended = timezone.now()
        assert ReceiptEvent.objects.filter(received_at__gte=outage_started).count() == 0
        connection.close()

        proxy.up()
        pipeline.worker(queues="receipts")
        pipeline.beat()
        pipeline.wait_until(lambda: not list(spool_dir.glob("*.json")), 60, "the spool to drain")
        pipeline.wait_all_final([m.pk for m in msgs], timeout=60, final=FINAL)

        for m in outage:
            m.refresh_from_db()
            assert m.status == expected[m.pk], m.provider_message_id
            receipts = ReceiptEvent.objects.filter(provider_message_id=m.provider_message_id)
            assert receipts.count() == 1
            receipt = receipts.get()
            # when it arrived, during the outage, not when it was drained
            assert outage_started <= receipt.received_at <= outage_ended
            assert (
                MessageEvent.objects.filter(
                    message=m, kind__in=[Status.DELIVERED, Status.UNDELIVERED]
                ).count()
                == 1
            )
        assert not list(spool_dir.glob("*"))  # nothing left behind, no temporary files

        # The web process recovers its connections: the next callback is stored (directly, or, if this
        # gunicorn worker has not yet noticed the database is back, through the spool, which drains).
        late = msgs[0]
        assert _post_callback(base, token, _status_params(late.provider_message_id, "read")) in (200, 201)
        wait_for(
            lambda: ReceiptEvent.objects.filter(
                provider_message_id=late.provider_message_id, raw_status="read"
            ).exists(),
            60,
            "the callback after the outage stored",
        )
        assert not list(spool_dir.glob("*.json"))
    finally:
        proxy.close()
