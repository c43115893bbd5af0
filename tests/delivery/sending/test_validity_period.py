"""The ValidityPeriod and StatusCallback every submission carries, read back from what the sandbox received
(docs/architecture.md, "How it works", send worker step 2): ``ValidityPeriod = clamp(ceil(expires_at - the
instant the request is written), 1, 36000)`` seconds (not the claim's instant: a message held after its
claim must not outlive its expiry at the provider), stored on the Attempt too, and a StatusCallback
naming the message and attempt when SMSGW_PUBLIC_BASE_URL is set. And the sandbox really drops a message
whose validity passes while it is queued there (Twilio 30036)."""

from __future__ import annotations

import math
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from delivery.providers import types as provider_types
from delivery.sending import worker as sending
from delivery.sending.worker import validity_period
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from tests.factories import message, recipient, tenant_with_key
from tests.sandbox_process import unused_port

pytestmark = pytest.mark.django_db

HOUR = 3600


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


def queued(tenant, to, **kw) -> Message:
    msg = message(tenant, to=to, **kw)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    return msg


def clamp_ceil(seconds: float) -> int:
    return min(max(math.ceil(seconds), 1), 36000)


def expected_validity(msg: Message, attempt=None) -> int:
    """What the spec says the submission of ``msg``'s (only) attempt carried: taken as its request was
    written, which is when the adapter notes ``requested_at`` (to the 0.1 ms; a 10 ms margin before it
    covers the instant the period was taken), never earlier than the attempt's start. Returns the value
    the Attempt stored, once it is shown to be that."""
    attempt = attempt or msg.attempts.get()
    written = attempt.response["requested_at"]
    expires = msg.expires_at.timestamp()
    stored = attempt.validity_seconds
    assert clamp_ceil(expires - written) <= stored <= clamp_ceil(expires - written + 0.01), (stored, written)
    assert stored <= clamp_ceil((msg.expires_at - attempt.started_at).total_seconds())
    return stored


def sent_form(sandbox, msg: Message) -> dict:
    msg.refresh_from_db()
    assert msg.status == Status.SENT and msg.provider_message_id, (msg.public_id, msg.status)
    info = sandbox.message_info(msg.provider_message_id)
    assert info["sid"] == msg.provider_message_id
    return info


@pytest.mark.parametrize(
    ("ahead", "expected"),
    [
        (0.2, 1),  # under a second left: never 0, Twilio's minimum is 1
        (119.5, 120),  # rounded up: the provider may keep it until our expiry, not a second less
        (120.0, 120),
        (36000.0, 36000),
        (36000.5, 36000),  # Twilio's maximum
        (48 * HOUR, 36000),
        (-5.0, 1),  # already past (the claim expires such rows first): still a valid value
    ],
)
def test_validity_period_is_ceil_clamped_to_twilio_range(ahead, expected):
    now = timezone.now()
    assert validity_period(now + timedelta(seconds=ahead), now) == expected


def test_every_submission_carries_its_own_validity_period_also_stored_on_the_attempt(
    adapter, sandbox, tenant, settings
):
    settings.SMSGW_PUBLIC_BASE_URL = ""
    validities = {recipient(i): v for i, v in enumerate((120, 600, 9 * HOUR, 10 * HOUR + 30, 48 * HOUR))}
    msgs = [queued(tenant, to, validity=v) for to, v in validities.items()]
    report = sending.send_batch([m.pk for m in msgs])
    assert report.claimed == 5 and report.outcomes == {"accepted": 5}
    assert sandbox.stats()["submissions"] == 5
    for msg in msgs:
        info = sent_form(sandbox, msg)
        expected = expected_validity(msg)
        attempt = msg.attempts.get()
        assert info["form"]["ValidityPeriod"] == str(expected), msg.to
        assert info["validity_period"] == expected
        assert attempt.validity_seconds == expected
        assert attempt.provider_message_id == msg.provider_message_id
    by_to = {m.to: m.attempts.get().validity_seconds for m in msgs}
    # Short validities are sent as what is left of them (at most a second or two went by); anything at
    # or over Twilio's 10 h is clamped to 36000, never rejected by the provider as out of range.
    assert 118 <= by_to[recipient(0)] <= 120
    assert 598 <= by_to[recipient(1)] <= 600
    assert 9 * HOUR - 2 <= by_to[recipient(2)] <= 9 * HOUR
    assert by_to[recipient(3)] == 36000
    assert by_to[recipient(4)] == 36000


def test_short_validity_is_what_is_left_at_the_attempt_not_the_original_validity(adapter, sandbox, tenant):
    # Due 100 s ago with 120 s of validity: about 20 s are left when it is submitted.
    msg = queued(tenant, recipient(7), due_in=-100, validity=120)
    sending.send_batch([msg.pk])
    info = sent_form(sandbox, msg)
    expected = expected_validity(msg)
    assert 18 <= expected <= 20
    assert info["form"]["ValidityPeriod"] == str(expected)
    assert msg.attempts.get().validity_seconds == expected


def test_a_message_held_after_its_claim_is_sent_with_what_is_left_when_its_request_is_written(
    adapter, sandbox, tenant, settings, monkeypatch
):
    # Claimed now, but its paced slot is 3 s later: the worker holds it that long before writing the
    # request. What Twilio receives must end at expires_at, so it is 3 s shorter than at the claim.
    settings.PACING_RELEASE_AHEAD_SECONDS = 5.0  # a slot may be up to 10 s ahead (delivery.sending.worker)
    # About the hold, not about a busy machine's late wake-up (test_worker.py has that): a late wake-up
    # would ask for a new slot, which this test's open transaction keeps the reslot thread from giving.
    monkeypatch.setattr(provider_types, "LATE_SEND_SECONDS", 60.0)
    msg = queued(tenant, recipient(8), validity=120)
    hold = 3.0
    report = sending.send_batch([msg.pk], not_before=[time.time() + hold])
    assert report.claimed == 1 and report.outcomes == {"accepted": 1}
    info = sent_form(sandbox, msg)
    attempt = msg.attempts.get()
    held = attempt.response["requested_at"] - attempt.started_at.timestamp()
    assert held >= hold - 0.2, held  # the claim itself took a moment of the hold
    at_claim = clamp_ceil((msg.expires_at - attempt.started_at).total_seconds())
    sent = int(info["form"]["ValidityPeriod"])
    assert sent == expected_validity(msg) == attempt.validity_seconds == info["validity_period"]
    assert sent <= at_claim - 2  # not the claim's value: the hold is taken off
    assert 114 <= sent <= 117


def test_status_callback_names_message_and_attempt_when_public_base_url_is_set(
    adapter, sandbox, tenant, settings
):
    base = f"http://127.0.0.1:{unused_port()}"
    settings.SMSGW_PUBLIC_BASE_URL = base + "/"  # a trailing slash is not doubled
    sandbox.config(callbacks_enabled=False)  # nothing listens there; only the URL given matters here
    msgs = [queued(tenant, recipient(i)) for i in range(3)]
    sending.send_batch([m.pk for m in msgs])
    for msg in msgs:
        info = sent_form(sandbox, msg)
        attempt = msg.attempts.get()
        assert attempt.number == 1
        ref = msg.public_id.removeprefix("msg_")
        suffix = f"/receipts/twilio/?m={ref}&a={attempt.number}"
        callback = info["form"]["StatusCallback"]
        assert callback.endswith(suffix), callback
        assert callback == base + suffix
        assert info["status_callback"] == callback
        assert "msg_" not in callback


def test_status_callback_names_the_attempt_number_of_a_resend(adapter, sandbox, tenant, settings):
    settings.SMSGW_PUBLIC_BASE_URL = f"http://127.0.0.1:{unused_port()}"
    settings.RETRY_BASE_SECONDS = 0.0
    sandbox.config(callbacks_enabled=False)
    to = recipient(9)
    # 30008 (transient, a resend may get past it); a 5xx would be uncertain, looked up before a resend
    sandbox.config(rules=[{"to": to, "action": "400", "error_code": 30008, "times": 1}])
    msg = queued(tenant, to)
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.QUEUED and msg.provider_calls == 1
    sending.send_batch([msg.pk])
    info = sent_form(sandbox, msg)
    second = msg.attempts.get(number=2)
    assert second.provider_message_id == msg.provider_message_id
    ref = msg.public_id.removeprefix("msg_")
    assert info["form"]["StatusCallback"].endswith(f"/receipts/twilio/?m={ref}&a=2")
    expected = expected_validity(msg, second)
    assert info["form"]["ValidityPeriod"] == str(expected) == str(second.validity_seconds)


def test_no_status_callback_without_public_base_url(adapter, sandbox, tenant, settings):
    settings.SMSGW_PUBLIC_BASE_URL = ""
    msgs = [queued(tenant, recipient(i)) for i in range(3)]
    sending.send_batch([m.pk for m in msgs])
    for msg in msgs:
        info = sent_form(sandbox, msg)
        assert "StatusCallback" not in info["form"]
        assert info["status_callback"] is None and info["callbacks"] is False
        assert "ValidityPeriod" in info["form"]  # the validity is sent either way
    assert sandbox.stats()["callbacks"] == {
        "sent": 0,
        "failed": 0,
        "dropped": 0,
        "pending": 0,
        "attempts": 0,
        "retries": 0,
    }


def test_sandbox_drops_a_message_whose_validity_passes_while_queued_there(adapter, sandbox, tenant, settings):
    settings.SMSGW_PUBLIC_BASE_URL = ""
    queue_delay_s = 6.0
    sandbox.config(queue_delay_ms=queue_delay_s * 1000)
    # Expires about 2 s from now here, so it is sent with ValidityPeriod 2 (or 1 on a slow machine),
    # while the sandbox keeps every message queued for 6 s: Twilio would drop it with 30036.
    msg = queued(tenant, recipient(5), validity=2)
    report = sending.send_batch([msg.pk])
    assert report.claimed == 1 and report.outcomes == {"accepted": 1}
    info = sent_form(sandbox, msg)
    validity = int(info["form"]["ValidityPeriod"])
    assert validity == expected_validity(msg) == msg.attempts.get().validity_seconds
    assert 1 <= validity <= 2 < queue_delay_s
    assert info["initial_status"] == "queued"

    deadline = time.monotonic() + validity + 10
    while info["status"] != "failed" and time.monotonic() < deadline:
        time.sleep(0.1)
        info = sandbox.message_info(msg.provider_message_id)
    assert info["status"] == "failed", info
    assert info["error_code"] == 30036 and info["final_status"] == "failed"
    # dropped at created + ValidityPeriod, before it would have left the queue, and never sent
    assert info["final_at"] == pytest.approx(info["created_at"] + validity, abs=1e-3)
    assert info["final_at"] < info["release_at"]
    assert info["sent_at"] is None
    assert [step["status"] for step in info["timeline"]] == ["failed"]
    fetched = sandbox.client().messages(msg.provider_message_id).fetch()
    assert (fetched.status, fetched.error_code, fetched.date_sent, fetched.price) == (
        "failed",
        30036,
        None,
        None,
    )
    stats = sandbox.stats()
    assert stats["by_status"] == {"failed": 1}
    sender = stats["senders"][msg.from_number]
    assert (sender["submitted"], sender["sent"]) == (1, 0)
