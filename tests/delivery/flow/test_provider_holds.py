"""Account faults hold their scope instead of failing messages; throttling is not an attempt; an opt-out is
recorded. In-process send worker, against the real sandbox through the real Twilio adapter."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from delivery.flow import provider_holds as holds
from delivery.models import AttemptOutcome, OptOutSignal, ProviderHold
from delivery.sending import worker as sending
from scheduling.dispatch import release
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from tests.factories import message, recipient, tenant_with_key

pytestmark = pytest.mark.django_db
OTHER_SENDER = "+14155550199"


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


def queued(tenant, to, **kw) -> Message:
    from_number = kw.pop("from_number", None)
    msg = message(tenant, to=to, **kw)
    if from_number:
        Message.objects.filter(pk=msg.pk).update(from_number=from_number)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    msg.refresh_from_db()
    return msg


def statuses(msgs):
    return {m.pk: Message.objects.get(pk=m.pk).status for m in msgs}


def make_probe_due(hold: ProviderHold) -> None:
    ProviderHold.objects.filter(pk=hold.pk).update(next_probe_at=timezone.now() - timedelta(seconds=1))
    holds._cache.clear()  # workers see open holds at most a second late; the test does not wait for it


def test_rotated_auth_token_holds_the_account_and_fails_no_message(
    adapter, sandbox, tenant, settings, caplog
):
    real_token = settings.TWILIO_AUTH_TOKEN
    settings.TWILIO_AUTH_TOKEN = "rotated-away"  # Twilio answers 401 / 20003
    first = [queued(tenant, recipient(i)) for i in range(3)]
    with caplog.at_level(logging.ERROR, logger="delivery.flow.provider_holds"):
        report = sending.send_batch([m.pk for m in first])
    assert report.outcomes == {"account_fault": 3}
    hold = ProviderHold.objects.get()
    assert (hold.scope, hold.error_code, hold.cleared_at) == ("account", "20003", None)
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1, "one alert per hold"
    for m in first:
        m.refresh_from_db()
        assert m.status == Status.QUEUED and m.reason_code == "provider_hold"
        assert m.attempt_count == 0 and m.provider_calls == 1, "an account fault is not the message's attempt"
        assert "held" in m.status_reason and m.run_after >= hold.next_probe_at - timedelta(seconds=1)
        assert m.attempts.get().outcome == AttemptOutcome.ACCOUNT_FAULT

    # While the hold is open, nothing else of the account is submitted: parked, one `held` entry each.
    later = [queued(tenant, recipient(10 + i)) for i in range(2)]
    report = sending.send_batch([m.pk for m in later])
    assert report.claimed == 0 and report.held == 2
    sending.send_batch([m.pk for m in later])  # parked again: no second timeline entry
    for m in later:
        assert m.events.filter(kind="held").count() == 1
        assert m.attempts.count() == 0
    assert sandbox.stats()["by_outcome"]["unauthorized"] == 3

    # The probe fetches the account (no message spent): still refused -> stays held, backs off.
    make_probe_due(hold)
    assert holds.holds_probe_due() == {"probed": 1, "cleared": 0}
    hold.refresh_from_db()
    assert hold.cleared_at is None and "20003" in hold.last_probe_detail
    # an account probe costs one GET, not a message: it keeps its interval
    assert hold.probe_interval_seconds == 15 and hold.next_probe_at > timezone.now() + timedelta(seconds=10)

    # The token is fixed: the next probe clears the hold and releases every held message at once.
    settings.TWILIO_AUTH_TOKEN = real_token
    make_probe_due(hold)
    assert holds.holds_probe_due() == {"probed": 1, "cleared": 1}
    hold.refresh_from_db()
    assert hold.cleared_at and hold.cleared_by == "probe"
    everyone = first + later
    for m in everyone:
        m.refresh_from_db()
        assert m.status == Status.QUEUED and m.reason_code == "" and m.run_after <= timezone.now()
        assert m.events.filter(kind="hold_released").count() == 1
    assert release.due_release(limit=100).republished == 5
    sending.send_batch([m.pk for m in everyone])
    assert set(statuses(everyone).values()) == {Status.SENT}
    assert sandbox.stats()["submissions"] == 5
    assert not Message.objects.filter(status=Status.FAILED).exists()


def test_a_hold_cleared_by_another_process_is_not_applied_again_from_a_stale_cache(
    adapter, sandbox, tenant, settings
):
    """A worker's view of the open holds may be a second old. When another process has just cleared the
    hold and released its messages, this worker must send them, not hold them a second time."""
    real_token = settings.TWILIO_AUTH_TOKEN
    settings.TWILIO_AUTH_TOKEN = "rotated-away"
    held = [queued(tenant, recipient(40 + i)) for i in range(3)]
    sending.send_batch([m.pk for m in held])
    hold = ProviderHold.objects.get()
    settings.TWILIO_AUTH_TOKEN = real_token
    assert holds.holds_open(adapter.name, adapter.account)  # this process now has the hold cached
    stale = dict(holds._cache)
    assert holds.hold_clear(hold.id, by="probe", reason="probe succeeded") == 3  # "another process"
    holds._cache.update(stale)  # ... whose clearing this process's cache has not seen yet

    report = sending.send_batch([m.pk for m in held])
    assert report.held == 0 and report.claimed == 3
    assert set(statuses(held).values()) == {Status.SENT}
    for m in held:
        assert m.events.filter(kind="held").count() == 1
        assert m.events.filter(kind="hold_released").count() == 1


def test_unregistered_sender_holds_that_sender_only_and_a_probe_message_clears_it(adapter, sandbox, tenant):
    bad_to = recipient(20)
    sandbox.config(rules=[{"to": bad_to, "action": "400", "error_code": 30034, "times": 1}])
    trigger = queued(tenant, bad_to)
    sending.send_batch([trigger.pk])
    hold = ProviderHold.objects.get()
    assert (hold.scope, hold.scope_value, hold.error_code) == ("sender", trigger.from_number, "30034")

    same_sender = [queued(tenant, recipient(21 + i)) for i in range(3)]
    other_sender = queued(tenant, recipient(30), from_number=OTHER_SENDER)
    report = sending.send_batch([m.pk for m in [*same_sender, other_sender]])
    assert report.claimed == 1 and report.held == 3
    assert Message.objects.get(pk=other_sender.pk).status == Status.SENT

    # The probe is due: exactly one message of the held sender goes out; it is accepted, so the hold
    # clears and the rest are released.
    make_probe_due(hold)
    Message.objects.filter(pk__in=[m.pk for m in [trigger, *same_sender]]).update(run_after=timezone.now())
    report = sending.send_batch([m.pk for m in [trigger, *same_sender]])
    assert report.claimed == 1
    probe = Message.objects.get(status=Status.SENT, pk__in=[m.pk for m in [trigger, *same_sender]])
    assert probe.events.filter(kind="attempt_started").order_by("-id")[0].details.get("probe") is True
    hold.refresh_from_db()
    assert hold.cleared_at is not None and hold.cleared_by == "probe"
    rest = [m for m in [trigger, *same_sender] if m.pk != probe.pk]
    assert all(Message.objects.get(pk=m.pk).reason_code == "" for m in rest)
    sending.send_batch([m.pk for m in rest])
    assert set(statuses([trigger, *same_sender, other_sender]).values()) == {Status.SENT}


def test_operator_clear_releases_held_messages(adapter, sandbox, tenant, settings):
    settings.TWILIO_AUTH_TOKEN = "rotated-away"
    msgs = [queued(tenant, recipient(40 + i)) for i in range(2)]
    sending.send_batch([m.pk for m in msgs])
    hold = ProviderHold.objects.get()
    assert holds.hold_clear(hold.id, by="admin:ops", reason="token fixed") == 2
    assert holds.hold_clear(hold.id, by="admin:ops", reason="again") == 0
    released = Message.objects.get(pk=msgs[0].pk).events.get(kind="hold_released")
    assert released.actor == "admin:ops"


def test_opted_out_recipient_fails_with_reason_and_is_recorded(adapter, sandbox, tenant):
    to = recipient(50)
    sandbox.config(rules=[{"to": to, "action": "400", "error_code": 21610}])
    msg = queued(tenant, to)
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.FAILED and msg.reason_code == "opted_out" and msg.error_code == "21610"
    signal = OptOutSignal.objects.get()
    assert (signal.tenant_id, signal.to, signal.error_code, signal.message_id) == (
        tenant.pk,
        to,
        "21610",
        msg.pk,
    )


@pytest.mark.parametrize(("action", "code"), [("400", 21611), ("429", 20429)])
def test_full_sender_queue_or_429_without_retry_after_backs_off_uncharged(
    adapter, sandbox, tenant, settings, action, code
):
    settings.THROTTLE_BASE_SECONDS = 4
    to = recipient(60)
    rule = {"to": to, "action": action, "times": 3, "error_code": code}
    if action == "429":
        del rule["error_code"]
        sandbox.config(retry_after_seconds=0)  # no Retry-After header, like Twilio
    sandbox.config(rules=[rule])
    msg = queued(tenant, to)
    waits = []
    for _ in range(3):
        before = timezone.now()
        sending.send_batch([msg.pk])
        msg.refresh_from_db()
        assert msg.status == Status.QUEUED and msg.reason_code == "provider_throttled"
        waits.append((msg.run_after - before).total_seconds())
        Message.objects.filter(pk=msg.pk).update(run_after=timezone.now())
    assert msg.attempt_count == 0 and msg.provider_calls == 3
    # exponential, jittered: 2-4 s, then 4-8 s, then 8-16 s
    assert 1.9 <= waits[0] <= 4.1 and 3.9 <= waits[1] <= 8.1 and 7.9 <= waits[2] <= 16.1, waits
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.SENT and msg.attempt_count == 1
