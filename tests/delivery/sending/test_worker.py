"""The send worker's service and the reconciler, in-process, against the real sandbox through the real
Twilio adapter: every provider outcome ends each message in the state the lifecycle requires (docs/architecture.md)."""

from __future__ import annotations

import itertools
import os
import threading
import time
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from delivery.flow import pacing
from delivery.models import Attempt, AttemptOutcome, RateBucket
from delivery.sending import late, reconcile
from delivery.sending import worker as sending
from scheduling.dispatch import release
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from tests.factories import message, recipient, tenant_with_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


def queued(tenant, to, **kw) -> Message:
    msg = message(tenant, to=to, **kw)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    return msg


def kinds(msg):
    return list(msg.events.order_by("id").values_list("kind", flat=True))


def test_accepted_batch_is_sent_with_attempt_and_timeline(adapter, sandbox, tenant):
    msgs = [queued(tenant, recipient(i)) for i in range(5)]
    report = sending.send_batch([m.pk for m in msgs])
    assert report.claimed == 5 and report.outcomes == {"accepted": 5}
    for m in msgs:
        m.refresh_from_db()
        assert m.status == Status.SENT and m.provider_message_id.startswith("SM") and m.sent_at
        assert kinds(m) == ["created", "queued", "attempt_started", "sent"]
        attempt = m.attempts.get()
        assert (attempt.number, attempt.outcome, attempt.provider_message_id) == (
            1,
            AttemptOutcome.ACCEPTED,
            m.provider_message_id,
        )
    assert sandbox.stats()["submissions"] == 5


def test_paced_messages_are_submitted_at_their_slots_not_at_once(adapter, sandbox, tenant):
    msgs = [queued(tenant, recipient(i)) for i in range(5)]
    start = time.time() + 0.3
    slots = [start + 0.15 * i for i in range(5)]
    sending.send_batch([m.pk for m in msgs], not_before=slots)
    created = {row[3]: row[0] for row in sandbox.submissions(0)}  # [created_unix, sender, segments, to]
    arrivals = [created[m.to] for m in msgs]
    # Each submission reaches the provider at or after its own slot, so the five span at least the 0.6 s
    # their slots do (sent at once, the last four would arrive early). The gaps between arrivals are not
    # asserted: on a loaded machine one request can be late and the next on time.
    for arrived, slot in zip(arrivals, slots, strict=True):
        assert arrived >= slot - 0.005, f"never before its slot: {arrived - slot:+.3f} s"
    # The attempt keeps the slot beside when the request left (bench paced reads both: how late it went).
    for m, slot in zip(msgs, slots, strict=True):
        response = m.attempts.get().response
        assert response["slot"] == round(slot, 4) and response["requested_at"] >= response["slot"] - 0.005


def test_a_paced_batch_that_reaches_the_worker_late_keeps_its_spacing(adapter, sandbox, tenant):
    msgs = [queued(tenant, recipient(i)) for i in range(4)]
    past = time.time() - 5  # the batch waited in the broker far beyond its slots
    sending.send_batch([m.pk for m in msgs], not_before=[past + 0.15 * i for i in range(4)])
    created = {row[3]: row[0] for row in sandbox.submissions(0)}
    arrivals = [created[m.to] for m in msgs]
    assert min(b - a for a, b in itertools.pairwise(arrivals)) > 0.1, "shifted, not sent in one burst"


def test_a_late_paced_batch_goes_after_its_senders_released_slots_and_pushes_them_back(
    adapter, sandbox, tenant, settings
):
    """The sender's bucket says slots up to ``released_until`` are already out with other workers: the
    late batch's messages take new slots after them, at the sender's spacing, and the bucket moves past
    them so the sender's next releases do not go out together with them."""
    settings.PACING_HEADROOM = 1.0
    msgs = [queued(tenant, recipient(i)) for i in range(4)]
    released_until = time.time() + 0.3
    bucket = RateBucket.objects.create(
        key=pacing.bucket_key(adapter.name, adapter.account, "sender", msgs[0].from_number),
        kind="sender",
        rate_configured=5.0,
        rate_effective=5.0,
        tat=datetime.fromtimestamp(released_until, tz=UTC),
        projected_until=datetime.fromtimestamp(released_until, tz=UTC),
        updated_at=timezone.now(),
    )
    past = time.time() - 5  # the batch waited in the broker far beyond its slots
    report = sending.send_batch([m.pk for m in msgs], not_before=[past + 0.2 * i for i in range(4)])
    assert report.outcomes == {"accepted": 4}
    created = {row[3]: row[0] for row in sandbox.submissions(0)}
    arrivals = [created[m.to] for m in msgs]
    for i, arrived in enumerate(arrivals):  # never before its new slot (late ones are not asserted)
        assert arrived >= released_until + 0.2 * i - 0.005, f"message {i}: {arrived - released_until:+.3f} s"
    bucket.refresh_from_db()
    assert bucket.tat.timestamp() >= released_until + 0.8 - 1e-5, "the sender's next slot is after them"


def hold_until(instant: float) -> None:
    """Run on the adapter's event loop: keep it from running anything else until the wall clock reaches
    ``instant`` (epoch seconds), however late the hold started, so every slot before it is missed."""
    never_set = threading.Event()
    while (left := instant - time.time()) > 0:
        never_set.wait(left)


@pytest.mark.django_db(transaction=True)
def test_slots_a_process_wakes_up_too_late_for_take_new_ones_instead_of_going_together(
    adapter, sandbox, tenant, settings
):
    """The send process's event loop is held from before a paced batch is handed to it until its five
    slots have passed: on waking, the missed slots would go out in the same instant. Each instead takes a new slot at the end of its
    sender's line in the shared bucket (delivery.sending.late, answered from this process's reslot
    thread), goes at it, and the bucket's next slot moves past them."""
    if connection.vendor != "postgresql":
        pytest.skip("the reslot thread's own connection must see the committed bucket: PostgreSQL")
    settings.PACING_HEADROOM = 1.0
    msgs = [queued(tenant, recipient(i)) for i in range(5)]
    key = pacing.bucket_key(adapter.name, adapter.account, "sender", msgs[0].from_number)
    now = time.time()
    RateBucket.objects.create(
        key=key,
        kind="sender",
        rate_configured=5.0,
        rate_effective=5.0,
        tat=datetime.fromtimestamp(now + 1.0, tz=UTC),  # released up to here (these five among them)
        projected_until=datetime.fromtimestamp(now + 1.0, tz=UTC),
        updated_at=timezone.now(),
    )
    slots = [now + 0.2 + 0.2 * i for i in range(5)]  # 0.2 .. 1.0 s from now, 5/s
    adapter.warm()
    loop = adapter._loop
    held_until: list[float] = []

    def hold_the_loop() -> None:  # a busy machine: the loop runs nothing else until every slot passed
        hold_until(slots[-1] + 0.5)
        held_until.append(time.time())

    # Held from before the batch reaches the loop, so no submission can go at its slot however loaded the
    # machine is.
    loop.call_soon_threadsafe(hold_the_loop)
    report = sending.send_batch([m.pk for m in msgs], not_before=slots)
    assert report.outcomes == {"accepted": 5}
    assert held_until, "the loop was held"
    created = {row[3]: row[0] for row in sandbox.submissions(0)}
    moved = []
    for m, old in zip(msgs, slots, strict=True):
        response = m.attempts.get().response
        assert response.get("reslots", 0) >= 1, f"missed slot {old - now:.2f} s kept: {response}"
        assert response["slot"] >= held_until[0] - 0.01, "the new slot is after the wake-up"
        assert created[m.to] >= response["slot"] - 0.005, "never before its new slot"
        moved.append(response["slot"])
    moved.sort()
    gaps = [b - a for a, b in itertools.pairwise(moved)]
    assert min(gaps) >= 0.2 - 1e-3, f"the sender's spacing (5/s), not one instant: {gaps}"
    bucket = RateBucket.objects.get(key=key)
    assert bucket.tat.timestamp() >= moved[-1] + 0.2 - 1e-3, "the sender's next slot is after them"


def test_a_paced_message_of_a_sender_without_a_bucket_goes_when_its_process_wakes_up(
    adapter, sandbox, tenant
):
    """Nothing to reslot against (no bucket row for the sender): the late request goes as it is."""
    msg = queued(tenant, recipient(0))
    adapter.warm()
    loop = adapter._loop
    slot = time.time() + 0.2
    loop.call_soon_threadsafe(hold_until, slot + 0.4)  # from before the message reaches the loop
    assert sending.send_batch([msg.pk], not_before=[slot]).outcomes == {"accepted": 1}
    response = msg.attempts.get().response
    assert response["slot"] == round(slot, 4) and "reslots" not in response
    assert response["requested_at"] >= slot + 0.3, "it went late, at once, when the loop woke up"


def test_an_ask_its_submission_stopped_waiting_for_is_skipped_and_the_others_answered(adapter):
    """A submission that waited RESLOT_WAIT_SECONDS for a new slot went as it was and cancelled its ask:
    answering a batch with it skips it (the thread would otherwise die on it) and answers the others."""
    asks = [
        late._Ask(
            adapter.name, adapter.account, mid, "+14155550100", 1, time.time() - 1, time.time() + 30, Future()
        )
        for mid in (1, 2)
    ]
    assert asks[0].answer.cancel()
    late.reslotter().answer(asks)
    assert asks[0].answer.cancelled()
    assert asks[1].answer.result(timeout=0) == 0.0, "no bucket for this sender: it goes as it is"


def test_an_ask_near_its_deadline_does_not_leave_the_others_of_its_sender_without_slots(adapter, settings):
    """Asks answered together: one may ask for new slots only for another 0.1 s (its claim is old), the
    other for 30 s. The sender's line starts 0.2 s ahead. Both get slots after it: a horizon cut to the
    nearest deadline would have left the whole sender out, and both would have gone at once."""
    settings.PACING_HEADROOM = 1.0
    sender = "+14155550100"
    now = time.time()
    RateBucket.objects.create(
        key=pacing.bucket_key(adapter.name, adapter.account, "sender", sender),
        kind="sender",
        rate_configured=10.0,
        rate_effective=10.0,
        tat=datetime.fromtimestamp(now + 0.2, tz=UTC),
        projected_until=datetime.fromtimestamp(now + 0.2, tz=UTC),
        updated_at=timezone.now(),
    )
    asks = [
        late._Ask(adapter.name, adapter.account, mid, sender, 1, now - 1, now + ahead, Future())
        for mid, ahead in ((1, 0.1), (2, 30.0))
    ]
    late.reslotter().answer(asks)
    slots = [a.answer.result(timeout=0) for a in asks]
    assert all(slot >= now + 0.2 - 1e-6 for slot in slots), slots
    assert abs(slots[1] - slots[0]) == pytest.approx(0.1, abs=1e-4), "the sender's spacing"
    gone = late._Ask(adapter.name, adapter.account, 3, sender, 1, now - 1, time.time() - 0.01, Future())
    late.reslotter().answer([gone])
    assert gone.answer.result(timeout=0) == 0.0, "past its deadline it goes as it is"


def test_duplicate_task_for_the_same_batch_submits_nothing_more(adapter, sandbox, tenant):
    msgs = [queued(tenant, recipient(i)) for i in range(3)]
    sending.send_batch([m.pk for m in msgs])
    again = sending.send_batch([m.pk for m in msgs])
    assert again.claimed == 0
    assert sandbox.stats()["submissions"] == 3
    assert Attempt.objects.count() == 3


def test_429_is_throttled_resent_after_retry_after_and_not_charged(adapter, sandbox, tenant, settings):
    to = recipient(1)
    sandbox.config(rules=[{"to": to, "action": "429", "times": 1, "retry_after_seconds": 30}])
    msg = queued(tenant, to)
    before = timezone.now()
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.QUEUED and msg.reason_code == "provider_throttled"
    assert (msg.attempt_count, msg.provider_calls) == (0, 1), "a throttled call is not an attempt"
    assert msg.attempts.get().http_status == 429
    assert msg.run_after >= before + timedelta(seconds=29), "Retry-After was not honoured"
    assert kinds(msg)[-1] == "throttled"
    # When the retry time comes, the sweep re-publishes it and the next attempt succeeds.
    Message.objects.filter(pk=msg.pk).update(run_after=timezone.now())
    assert release.due_release(limit=10).republished == 1
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.SENT and (msg.attempt_count, msg.provider_calls) == (1, 2)
    assert list(msg.attempts.order_by("number").values_list("outcome", flat=True)) == [
        AttemptOutcome.THROTTLED,
        AttemptOutcome.ACCEPTED,
    ]
    assert sandbox.stats()["submissions"] == 1


def test_a_500_is_looked_up_before_any_resend_and_not_charged_when_absent(adapter, sandbox, tenant, settings):
    """A 5xx may hide a stored message (https://www.twilio.com/docs/api/errors/20500): never a blind
    retry. Reconciliation proves it absent, and only then is it sent again, the attempt not charged."""
    to = recipient(11)
    sandbox.config(rules=[{"to": to, "action": "500", "times": 1}])
    msg = queued(tenant, to)
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.SENDING and msg.reason_code == "submission_uncertain"
    assert msg.provider_calls == 1
    assert kinds(msg)[-1] == "attempt_uncertain"
    assert msg.attempts.get().outcome == AttemptOutcome.UNCERTAIN
    assert reconcile.message_reconcile(msg.pk) == "absent_once"
    age_attempt(msg, past_absence_bound(settings))
    assert reconcile.message_reconcile(msg.pk) == "absent"
    msg.refresh_from_db()
    assert msg.status == Status.QUEUED and (msg.attempt_count, msg.provider_calls) == (0, 1)
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.SENT and len(sandbox.list_messages(to=to)) == 1


def test_permanent_400_fails_with_code_and_keeps_attempt_history(adapter, sandbox, tenant):
    to = recipient(2)
    sandbox.config(rules=[{"to": to, "action": "400", "error_code": 21211}])
    msg = queued(tenant, to)
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.FAILED and msg.error_code == "21211" and msg.failed_at
    assert "21211" in msg.status_reason
    assert list(msg.attempts.values_list("outcome", "provider_code")) == [(AttemptOutcome.REJECTED, "21211")]
    failed = msg.events.get(kind="failed")
    assert failed.details["dead_letter"] is True


def test_retries_exhausted_end_failed(adapter, sandbox, tenant, settings):
    """An error the provider answered and classified transient (here 30008 on submission) is charged;
    after SMSGW_RETRY_MAX_ATTEMPTS the message is dead-lettered."""
    settings.RETRY_MAX_ATTEMPTS = 2
    settings.RETRY_BASE_SECONDS = 0.0
    to = recipient(3)
    sandbox.config(rules=[{"to": to, "action": "400", "error_code": 30008}])
    msg = queued(tenant, to)
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.QUEUED
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.FAILED and "gave up after 2 attempts" in msg.status_reason
    assert msg.attempts.count() == 2
    assert sandbox.stats()["submissions"] == 0


def test_provider_failures_never_exhaust_attempts_only_validity_ends_them(adapter, sandbox, tenant, settings):
    settings.RETRY_MAX_ATTEMPTS = 2
    settings.RETRY_BASE_SECONDS = 0.0
    to = recipient(12)
    sandbox.config(rules=[{"to": to, "action": "503"}])
    msg = queued(tenant, to)
    for _ in range(4):  # each 503 is uncertain; proven absent, it costs the message no attempt
        Message.objects.filter(pk=msg.pk).update(run_after=timezone.now())
        sending.send_batch([msg.pk])
        assert reconcile.message_reconcile(msg.pk) == "absent_once"
        age_attempt(msg, past_absence_bound(settings))
        assert reconcile.message_reconcile(msg.pk) == "absent"
    msg.refresh_from_db()
    assert msg.status == Status.QUEUED and msg.attempt_count == 0 and msg.provider_calls == 4
    Message.objects.filter(pk=msg.pk).update(expires_at=timezone.now())
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.EXPIRED


def test_expired_while_queued_is_not_sent(adapter, sandbox, tenant):
    msg = queued(tenant, recipient(4), due_in=-120, validity=60)
    report = sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert report.expired == 1 and msg.status == Status.EXPIRED and msg.expired_at
    assert sandbox.stats()["submissions"] == 0


def test_uncertain_accepted_submission_is_reconciled_to_sent_without_resending(
    adapter, sandbox, tenant, settings
):
    settings.TWILIO_TIMEOUT_SECONDS = 0.5
    from delivery.providers import get_adapter

    get_adapter.cache_clear()
    to = recipient(5)
    sandbox.config(rules=[{"to": to, "action": "accept_then_hang", "times": 1}], timeout_hang_seconds=2)
    msg = queued(tenant, to)
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.SENDING and msg.attempts.get().outcome == AttemptOutcome.UNCERTAIN
    assert reconcile.message_reconcile(msg.pk) == "found"
    msg.refresh_from_db()
    stored = sandbox.list_messages(to=to)
    assert len(stored) == 1 and msg.status == Status.SENT and msg.provider_message_id == stored[0].sid
    assert msg.attempts.get().outcome == AttemptOutcome.RECONCILED_FOUND
    assert "reconciled_found" in kinds(msg)
    # The provider stored it after the attempt started, and shows that instant in whole seconds (floored):
    # up to 1 s before the start; no timeline shows a send before its attempt or its due time.
    attempt = msg.attempts.get()
    assert attempt.started_at - timedelta(seconds=1) <= stored[0].date_created <= timezone.now()
    assert msg.sent_at >= attempt.started_at and msg.sent_at >= msg.due_at


def past_absence_bound(settings) -> float:
    """Seconds after which a complete empty listing proves absence: request timeout + processing grace +
    the list's lag bound (delivery.sending.reconcile)."""
    return (
        settings.TWILIO_TIMEOUT_SECONDS
        + settings.RECONCILE_ABSENT_GRACE_SECONDS
        + settings.RECONCILE_LIST_LAG_SECONDS
        + 1
    )


def age_attempt(msg, seconds: float) -> None:
    """Move the uncertain attempt (and any first look) back in time, as if the grace window had passed:
    the absence rule compares against started_at + timeout + grace."""
    attempt = msg.attempts.order_by("-number").first()
    Attempt.objects.filter(pk=attempt.pk).update(
        started_at=attempt.started_at - timedelta(seconds=seconds),
        lookup_absent_at=(attempt.lookup_absent_at - timedelta(seconds=seconds))
        if attempt.lookup_absent_at
        else None,
    )


def test_uncertain_lost_submission_is_absent_only_past_the_list_lag_bound_then_sent_once(
    adapter, sandbox, tenant, settings
):
    settings.TWILIO_TIMEOUT_SECONDS = 0.5
    from delivery.providers import get_adapter

    get_adapter.cache_clear()
    to = recipient(6)
    sandbox.config(rules=[{"to": to, "action": "timeout", "times": 1}], timeout_hang_seconds=2)
    msg = queued(tenant, to)
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.SENDING and msg.reason_code == "submission_uncertain"
    # First look: nothing found, but a retry is not declared safe yet.
    assert reconcile.message_reconcile(msg.pk) == "absent_once"
    msg.refresh_from_db()
    assert msg.status == Status.SENDING
    first = msg.events.get(kind="reconcile_absent_once").details
    assert first["lookup"]["method"] == "list" and first["lookup"]["complete"] is True
    assert msg.run_after >= timezone.now() + timedelta(seconds=settings.RECONCILE_ABSENT_GRACE_SECONDS - 2)
    # Looking again before the grace window has passed still does not resend.
    assert reconcile.message_reconcile(msg.pk) == "absent_once"
    # Past the grace window, but not the list's lag bound: a listing this early proves nothing yet.
    age_attempt(msg, settings.RECONCILE_ABSENT_GRACE_SECONDS + 1)
    assert reconcile.message_reconcile(msg.pk) == "absent_once"
    age_attempt(msg, settings.RECONCILE_LIST_LAG_SECONDS)
    assert reconcile.message_reconcile(msg.pk) == "absent"
    msg.refresh_from_db()
    assert msg.status == Status.QUEUED
    why = msg.events.get(kind="reconciled_absent").details
    assert why["rule"] == "list_lag_bound" and why["lookup"]["to"].endswith(to[-2:])
    assert to not in str(why), "the timeline masks the recipient"
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.SENT and len(sandbox.list_messages(to=to)) == 1
    assert list(msg.attempts.order_by("number").values_list("outcome", flat=True)) == [
        AttemptOutcome.RECONCILED_ABSENT,
        AttemptOutcome.ACCEPTED,
    ]


def test_reconcile_does_not_take_another_messages_submission(adapter, sandbox, tenant):
    """Same text to the same number twice: the first message's sid must not satisfy the second."""
    to = recipient(7)
    first = queued(tenant, to, body="same text")
    sending.send_batch([first.pk])
    second = queued(tenant, to, body="same text")
    transitions.transition(
        second.pk, from_statuses=[Status.QUEUED], to_status=Status.SENDING, kind="attempt_started"
    )
    Attempt.objects.create(
        message=second,
        number=1,
        provider="twilio",
        idempotency_token="t",
        started_at=timezone.now(),
        outcome=AttemptOutcome.UNCERTAIN,
    )
    assert reconcile.message_reconcile(second.pk) == "absent_once"
    lookup = second.events.get(kind="reconcile_absent_once").details["lookup"]
    assert lookup["body_matches"] == 1 and lookup["owned_by_other_messages"] == 1


def test_reconcile_defers_while_the_provider_is_unreachable(adapter, sandbox, tenant, settings):
    msg = queued(tenant, recipient(8))
    transitions.transition(
        msg.pk, from_statuses=[Status.QUEUED], to_status=Status.SENDING, kind="attempt_started"
    )
    settings.TWILIO_API_BASE_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
    from delivery.providers import get_adapter

    get_adapter.cache_clear()
    assert reconcile.message_reconcile(msg.pk) == "lookup_failed"
    msg.refresh_from_db()
    assert msg.status == Status.SENDING and "reconcile_deferred" in kinds(msg)


def sending_with_attempt(tenant, to) -> Message:
    msg = queued(tenant, to)
    transitions.transition(
        msg.pk, from_statuses=[Status.QUEUED], to_status=Status.SENDING, kind="attempt_started"
    )
    Attempt.objects.create(
        message=msg,
        number=1,
        provider="twilio",
        idempotency_token=f"t{msg.pk}",
        started_at=timezone.now() - timedelta(seconds=60),
        outcome=AttemptOutcome.UNCERTAIN,
    )
    return msg


def test_a_reconcile_task_stops_at_its_time_budget_and_leaves_the_rest_sending(adapter, sandbox, tenant):
    msgs = [sending_with_attempt(tenant, recipient(20 + i)) for i in range(3)]
    outcome = reconcile.reconcile_many([m.pk for m in msgs], budget_seconds=0)
    assert outcome == {"left_for_later": 3}
    for m in msgs:
        m.refresh_from_db()
        assert m.status == Status.SENDING and "reconcile_deferred" not in kinds(m)
    outcome = reconcile.reconcile_many([m.pk for m in msgs], budget_seconds=60)
    assert outcome == {"absent_once": 3}


def test_a_reconcile_task_does_not_wait_on_a_failing_or_open_provider(adapter, sandbox, tenant, settings):
    """During an outage a 250-id task used to look each message up in turn, each waiting for the
    timeout: now the first failure (or an open circuit) stops the look-ups for that account."""
    from delivery.flow import circuit
    from delivery.models import ProviderCircuit
    from delivery.providers import get_adapter

    msgs = [sending_with_attempt(tenant, recipient(30 + i)) for i in range(4)]
    settings.TWILIO_API_BASE_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
    get_adapter.cache_clear()
    outcome = reconcile.reconcile_many([m.pk for m in msgs])
    assert outcome == {"lookup_failed": 1, "circuit_open": 3}
    kinds_seen = [kinds(m) for m in msgs]
    assert sum("reconcile_deferred" in k for k in kinds_seen) == 1
    assert all(m.status == Status.SENDING for m in Message.objects.filter(pk__in=[m.pk for m in msgs]))
    a = get_adapter("twilio")
    ProviderCircuit.objects.update_or_create(
        provider=a.name,
        account=a.account,
        defaults={
            "state": circuit.OPEN,
            "window_started_at": timezone.now(),
            "updated_at": timezone.now(),
            # not yet due: a due probe is made by the first look-up (test_failover.py)
            "next_probe_at": timezone.now() + timedelta(seconds=60),
        },
    )
    assert reconcile.reconcile_many([m.pk for m in msgs]) == {"circuit_open": 4}
    # Once the probe is due, one look-up is the probe; it fails (nothing listens), the rest wait.
    ProviderCircuit.objects.filter(provider=a.name).update(next_probe_at=timezone.now())
    assert reconcile.reconcile_many([m.pk for m in msgs]) == {"lookup_failed": 1, "circuit_open": 3}
    assert ProviderCircuit.objects.get(provider=a.name).state == circuit.OPEN


def test_submissions_a_worker_holds_stay_unsent_once_it_has_seen_the_circuit_open(
    adapter, sandbox, tenant, monkeypatch
):
    """Paced messages wait in the worker for their slots; if the provider's circuit opens meanwhile
    (another process's answers), they are not sent into the outage: they wait, uncharged."""
    import threading

    from delivery.flow import circuit

    msgs = [queued(tenant, recipient(i)) for i in range(4)]
    opened = threading.Event()
    real_state = circuit.circuit_state

    def state(provider, account):  # the circuit row as another process leaves it, 0.3 s from now
        if not opened.is_set():
            return real_state(provider, account)
        circuit._local[(os.getpid(), provider, account)] = True
        return circuit.CircuitState(circuit.OPEN)

    def trip() -> None:
        opened.set()
        circuit._local[(os.getpid(), adapter.name, adapter.account)] = True

    monkeypatch.setattr(circuit, "circuit_state", state)
    start = time.time() + 0.6
    timer = threading.Timer(0.3, trip)
    timer.start()
    try:
        report = sending.send_batch([m.pk for m in msgs], not_before=[start + 0.05 * i for i in range(4)])
    finally:
        timer.cancel()
    assert report.claimed == 4
    assert sandbox.stats()["submissions"] == 0, "nothing went out"
    for m in msgs:
        m.refresh_from_db()
        assert m.status == Status.QUEUED and m.attempt_count == 0, "it waits, not charged"
        assert m.attempts.get().response.get("request_sent") is False
