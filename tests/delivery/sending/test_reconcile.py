"""The reconciler's rules (delivery/sending/reconcile.py), in-process, against the real sandbox through the
real Twilio adapter: when a lost answer may be resent (list-lag bound, the tenant's wait), what a found
copy means (failed at the provider: moved by the error table at once; more copies than ours: ambiguous,
never resent), and that a 404 proves nothing until the account itself answers."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from delivery.flow import provider_holds
from delivery.models import Attempt, AttemptOutcome, ProviderHold
from delivery.providers import get_adapter
from delivery.sending import reconcile
from delivery.sending import worker as sending
from receipts.models import ReceiptEvent
from receipts.processor import receipts_process_due
from scheduling.models import Message, Status
from tests.delivery.sending.test_worker import age_attempt, kinds, past_absence_bound, queued
from tests.factories import recipient, tenant_with_key
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


def uncertain(tenant, to, **kw) -> Message:
    """A message whose one attempt is uncertain: the sandbox stores it and answers 500 (20500)."""
    msg = queued(tenant, to, **kw)
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.SENDING and msg.attempts.get().outcome == AttemptOutcome.UNCERTAIN
    return msg


def lost(tenant, to, sandbox, **kw) -> Message:
    """A message whose one attempt never reached the sandbox (it answers 503 without storing)."""
    sandbox.config(rules=[{"to": to, "action": "503", "times": 1}])
    return uncertain(tenant, to, **kw)


def test_an_early_empty_listing_never_proves_absence_only_one_past_the_list_lag_bound(
    adapter, sandbox, tenant, settings
):
    settings.RECONCILE_LIST_LAG_SECONDS = 120
    to = recipient(31)
    msg = lost(tenant, to, sandbox)
    for aged in (0, settings.RECONCILE_ABSENT_GRACE_SECONDS + 1, 100):
        age_attempt(msg, aged)
        assert reconcile.message_reconcile(msg.pk) == "absent_once"
        msg.refresh_from_db()
        release = msg.attempts.get().started_at + timedelta(seconds=past_absence_bound(settings) - 1)
        assert msg.status == Status.SENDING and msg.run_after <= release
    age_attempt(msg, past_absence_bound(settings))
    assert reconcile.message_reconcile(msg.pk) == "absent"
    entry = msg.events.get(kind="reconciled_absent").details
    assert entry["rule"] == "list_lag_bound" and entry["lookup"]["complete"] is True
    assert "120 s" in entry["why"]
    msg.refresh_from_db()
    assert msg.status == Status.QUEUED and msg.attempt_count == 0
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.SENT and len(sandbox.list_messages(to=to)) == 1


def test_a_tenants_shorter_wait_releases_the_resend_and_the_timeline_says_so(
    adapter, sandbox, tenant, settings
):
    settings.RECONCILE_LIST_LAG_SECONDS = 120
    settings.RECONCILE_MIN_WAIT_SECONDS = 40
    to = recipient(32)
    msg = lost(tenant, to, sandbox)
    Message.objects.filter(pk=msg.pk).update(uncertain_wait_seconds=45)
    age_attempt(msg, 44)
    assert reconcile.message_reconcile(msg.pk) == "absent_once"
    age_attempt(msg, 2)
    assert reconcile.message_reconcile(msg.pk) == "absent"
    entry = msg.events.get(kind="reconciled_absent").details
    assert entry["rule"] == "tenant_wait" and "45 s" in entry["why"]


def test_a_wait_below_the_floor_counts_as_the_floor(adapter, sandbox, tenant, settings):
    settings.RECONCILE_MIN_WAIT_SECONDS = 40
    msg = lost(tenant, recipient(33), sandbox)
    Message.objects.filter(pk=msg.pk).update(uncertain_wait_seconds=1)  # only a direct write could do this
    msg.refresh_from_db()
    rule, at = reconcile.absence_release(msg, msg.attempts.get(), adapter.request_timeout)
    assert rule == "tenant_wait" and at == msg.attempts.get().started_at + timedelta(seconds=40)


def test_the_api_takes_the_wait_within_its_floor_and_bound(client, settings):
    tenant, key = tenant_with_key("otp")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    ok = client.post(
        "/v1/messages",
        {"to": recipient(34), "body": "code 1234", "uncertain_wait_seconds": 60},
        content_type="application/json",
        **auth,
    )
    assert ok.status_code == 201, ok.content
    assert ok.json()["uncertain_wait_seconds"] == 60
    assert Message.objects.get(public_id=ok.json()["id"]).uncertain_wait_seconds == 60
    for bad in (settings.RECONCILE_MIN_WAIT_SECONDS - 1, 100_000, "soon"):
        resp = client.post(
            "/v1/messages",
            {"to": recipient(35), "body": "code 1234", "uncertain_wait_seconds": bad},
            content_type="application/json",
            **auth,
        )
        assert resp.status_code == 400 and "uncertain_wait_seconds" in str(resp.json()), resp.content
    assert Message.objects.filter(tenant=tenant).count() == 1


def test_a_copy_found_failed_at_the_provider_is_retried_at_once(adapter, sandbox, tenant):
    """Stored then answered 500; Twilio then fails its copy (30008, unknown error: a resend may pass). The
    listing finds it failed: the message is recorded under that sid and the failure goes through the
    receipt table now: retried, and sent once more."""
    to = recipient(36)
    sandbox.config(
        rules=[{"to": to, "action": "store_then_500", "times": 1}],
        callbacks_enabled=False,
        callback_failed_share=1.0,
    )
    msg = uncertain(tenant, to)
    copy = wait_for(
        lambda: next((m for m in sandbox.list_messages(to=to) if m.status == "failed"), None),
        timeout=15,
        what="the sandbox to fail its stored copy",
    )
    assert reconcile.message_reconcile(msg.pk) == "found"
    msg.refresh_from_db()
    assert msg.status == Status.SENT and msg.provider_message_id == copy.sid
    found = msg.events.get(kind="reconciled_found").details
    assert found["source"] == "list" and found["provider_status"] == "failed"
    receipt = ReceiptEvent.objects.get(provider_message_id=copy.sid)
    assert receipt.payload["source"] == "lookup" and receipt.error_code == "30008"
    assert receipts_process_due() >= 1
    msg.refresh_from_db()
    assert msg.status == Status.QUEUED and kinds(msg)[-1] == "retry_scheduled"
    sandbox.config(callback_failed_share=0.0)
    Message.objects.filter(pk=msg.pk).update(run_after=timezone.now())
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.SENT and msg.provider_message_id != copy.sid
    assert sorted(m.status for m in sandbox.list_messages(to=to))[0] == "failed"
    assert len(sandbox.list_messages(to=to)) == 2  # the failed copy and the resend: never a third


def test_a_body_that_merely_ends_with_ours_is_not_ours(adapter, sandbox, tenant, settings):
    to = recipient(37)
    sandbox.client().messages.create(to=to, from_=tenant.default_from, body="Other text. Your code is 1234")
    msg = lost(tenant, to, sandbox, body="Your code is 1234")
    age_attempt(msg, past_absence_bound(settings))
    assert reconcile.message_reconcile(msg.pk) == "absent"
    lookup = msg.events.get(kind="reconciled_absent").details["lookup"]
    assert lookup["in_window"] == 1 and lookup["body_matches"] == 0
    sending.send_batch([msg.pk])
    bodies = sorted(m.body for m in sandbox.list_messages(to=to))
    assert bodies == ["Other text. Your code is 1234", "Your code is 1234"]


def test_more_matching_copies_than_uncertain_messages_is_ambiguous_and_never_resent(adapter, sandbox, tenant):
    """Someone else sent the same text to the same number through the same account: which copy is ours
    cannot be told. Recorded sent, flagged, never resent."""
    to = recipient(38)
    sandbox.client().messages.create(to=to, from_=tenant.default_from, body="Your table is ready")
    sandbox.config(rules=[{"to": to, "action": "store_then_500", "times": 1}], callbacks_enabled=False)
    msg = uncertain(tenant, to, body="Your table is ready")
    assert reconcile.message_reconcile(msg.pk) == "ambiguous"
    msg.refresh_from_db()
    assert msg.status == Status.SENT and msg.reason_code == "reconciled_ambiguous"
    assert not msg.provider_message_id
    entry = msg.events.get(kind="reconciled_ambiguous").details
    assert len(entry["candidates"]) == 2 and entry["lookup"]["uncertain_messages_alike"] == 1
    assert msg.attempts.get().outcome == AttemptOutcome.RECONCILED_AMBIGUOUS
    assert len(sandbox.list_messages(to=to)) == 2


def test_two_uncertain_messages_alike_each_take_one_copy(adapter, sandbox, tenant):
    to = recipient(39)
    sandbox.config(rules=[{"to": to, "action": "store_then_500", "times": 2}], callbacks_enabled=False)
    first = uncertain(tenant, to, body="same text")
    second = uncertain(tenant, to, body="same text")
    assert reconcile.message_reconcile(first.pk) == "found"
    assert reconcile.message_reconcile(second.pk) == "found"
    first.refresh_from_db()
    second.refresh_from_db()
    sids = {m.sid for m in sandbox.list_messages(to=to)}
    assert {first.provider_message_id, second.provider_message_id} == sids and len(sids) == 2


def sid_attempt(msg, sid: str) -> None:
    """The attempt recorded its sid, but the message never moved on (the worker died between the two)."""
    Attempt.objects.filter(message=msg).update(provider_message_id=sid, outcome=AttemptOutcome.UNCERTAIN)


def test_a_404_is_believed_only_once_the_account_answers(adapter, sandbox, tenant, settings):
    msg = lost(tenant, recipient(40), sandbox)
    sid_attempt(msg, "SM" + "0" * 32)
    assert reconcile.message_reconcile(msg.pk) == "absent"
    entry = msg.events.get(kind="reconciled_absent").details
    assert entry["rule"] == "fetch_404_account_ok"
    assert entry["lookup"]["account_check"] == "account status active"


def test_a_404_under_a_wrong_account_sid_holds_the_account_and_resends_nothing(
    adapter, sandbox, tenant, settings
):
    """API-key credentials are right, the account SID is not: Twilio answers 404 (20404) for a message
    that exists. The account fetch fails too, so the 404 proves nothing: the account is held, the
    message stays uncertain, and once the configuration is fixed and the hold cleared it is found."""
    to = recipient(41)
    sandbox.config(
        api_key_sid="SK" + "5" * 32,
        api_key_secret="key-secret",
        rules=[{"to": to, "action": "store_then_500", "times": 1}],
        callbacks_enabled=False,
    )
    msg = uncertain(tenant, to)
    (stored,) = sandbox.list_messages(to=to)
    sid_attempt(msg, stored.sid)
    settings.TWILIO_API_KEY_SID = "SK" + "5" * 32
    settings.TWILIO_API_KEY_SECRET = "key-secret"
    settings.TWILIO_ACCOUNT_SID = "AC" + "9" * 32
    get_adapter.cache_clear()
    provider_holds._cache.clear()
    assert reconcile.message_reconcile(msg.pk) == "held"
    hold = ProviderHold.objects.get(cleared_at__isnull=True)
    assert (hold.scope, hold.error_code) == ("account", "20404")
    msg.refresh_from_db()
    assert msg.status == Status.SENDING and msg.reason_code == "provider_hold"
    assert msg.run_after > timezone.now()
    assert len(sandbox.list_messages(to=to)) == 1 and sandbox.stats()["by_outcome"]["other_account"] == 0
    # Fixed: the right account SID (the key still authenticates). The held account is no longer the
    # configured one: the next probe clears its hold, and the message is looked up again at once.
    settings.TWILIO_ACCOUNT_SID = sandbox.account_sid
    get_adapter.cache_clear()
    provider_holds._cache.clear()
    ProviderHold.objects.filter(pk=hold.pk).update(next_probe_at=timezone.now())
    assert provider_holds.holds_probe_due() == {"probed": 1, "cleared": 1}
    hold.refresh_from_db()
    assert hold.cleared_at is not None and "another account" in hold.cleared_reason
    msg.refresh_from_db()
    assert msg.status == Status.SENDING and msg.run_after <= timezone.now()
    assert reconcile.message_reconcile(msg.pk) == "found"
    msg.refresh_from_db()
    assert msg.status == Status.SENT and msg.provider_message_id == stored.sid
    assert len(sandbox.list_messages(to=to)) == 1


def test_the_sandbox_answers_20404_for_valid_credentials_on_another_account(sandbox):
    from twilio.base.exceptions import TwilioRestException
    from twilio.rest import Client

    sandbox.reset()
    client = Client(sandbox.account_sid, sandbox.auth_token, account_sid="AC" + "9" * 32)
    client.edge = client.region = None
    client.api.base_url = sandbox.base_url
    with pytest.raises(TwilioRestException) as caught:
        client.messages.create(to=recipient(42), from_="+15005550006", body="x")
    assert (caught.value.status, caught.value.code) == (404, 20404)
    wrong = Client(sandbox.account_sid, "not-the-token")
    wrong.edge = wrong.region = None
    wrong.api.base_url = sandbox.base_url
    with pytest.raises(TwilioRestException) as refused:
        wrong.messages.create(to=recipient(42), from_="+15005550006", body="x")
    assert (refused.value.status, refused.value.code) == (401, 20003)
    assert sandbox.stats()["by_outcome"]["other_account"] == 1
