"""The decision tables (delivery.outcomes.table) and the delays (delivery.outcomes.delays): every answer an
adapter can give has a row, the rows say what the send path and the receipt processor do, and a batch mixing
charged and uncharged answers records each one as its row says."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.utils import timezone

from delivery.flow import circuit
from delivery.flow import provider_holds as holds
from delivery.models import AttemptOutcome
from delivery.outcomes import delays
from delivery.outcomes import table as outcomes
from delivery.outcomes.table import RECEIPT_MOVES, SUBMIT_MOVES, Answer, Delay, answer_of, submit_move
from delivery.providers.base import RECEIPT_STATUSES, ErrorClass, Outcome, SubmitResult
from delivery.providers.twilio import callbacks as twilio_callbacks
from delivery.providers.twilio import errors as twilio_errors
from delivery.providers.twilio.adapter import NOT_SENT
from delivery.sending import worker as sending
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from tests.factories import message, recipient, tenant_with_key

CLASSES = (None, *ErrorClass)
# What the Twilio adapter can hand the send path: every outcome with every class of its error table (and
# none), sent or held back at its slot, and an HTTP status of each kind the rules tell apart.
HTTP = (None, 200, 400, 408, 429, 500, 502, 503)


def results():
    for outcome, cls, http, sent in itertools.product(Outcome, CLASSES, HTTP, (True, False)):
        yield SubmitResult(outcome=outcome, error_class=cls, http_status=http, sent=sent)


def test_every_answer_and_class_has_a_submit_row():
    assert set(SUBMIT_MOVES) == set(itertools.product(Answer, CLASSES))
    for res in results():
        for halted, circuit_open in itertools.product((True, False), repeat=2):
            move = submit_move(res, halted=halted, circuit_open=circuit_open)
            assert move.status in (Status.SENT, Status.SENDING, Status.QUEUED, Status.FAILED)


def test_every_receipt_status_and_class_has_a_row_or_is_informational():
    adapter_statuses = set(twilio_callbacks.STATUS_MAP.values()) - {""}
    assert adapter_statuses <= RECEIPT_STATUSES
    classes = {info.error_class for info in twilio_errors.TABLE.values()}
    assert classes <= set(ErrorClass)
    informational = {"queued", "sending", "inbound"}
    for status, cls in itertools.product(RECEIPT_STATUSES, CLASSES):
        assert ((status, cls) in RECEIPT_MOVES) == (status not in informational), (status, cls)
    assert outcomes.RECEIPT_TARGET == {
        "sent": Status.SENT,
        "delivered": Status.DELIVERED,
        "undelivered": Status.UNDELIVERED,
        "failed": Status.FAILED,
        "canceled": Status.FAILED,
    }


def move_for(outcome, cls=None, http=None, *, sent=True, halted=False, circuit_open=False):
    res = SubmitResult(outcome=outcome, error_class=cls, http_status=http, sent=sent)
    return submit_move(res, halted=halted, circuit_open=circuit_open)


def test_submit_rows():
    m = move_for(Outcome.ACCEPTED)
    assert (m.kind, m.status, m.charged, m.reason_code) == ("sent", Status.SENT, True, "")
    m = move_for(Outcome.UNCERTAIN, http=502)
    assert (m.kind, m.status, m.delay, m.reason_code) == (
        "attempt_uncertain",
        Status.SENDING,
        Delay.RECONCILE,
        "submission_uncertain",
    )
    # 429: throttled, not charged, whatever the circuit says.
    for circuit_open in (False, True):
        m = move_for(Outcome.TRANSIENT, ErrorClass.THROTTLED, 429, circuit_open=circuit_open)
        assert (m.kind, m.status, m.charged, m.delay, m.reason_code) == (
            "throttled",
            Status.QUEUED,
            False,
            Delay.THROTTLE,
            "provider_throttled",
        )
    # A 5xx is the provider's failure: not charged; while the circuit is open it waits for the circuit.
    m = move_for(Outcome.TRANSIENT, ErrorClass.TRANSIENT, 503)
    assert (m.kind, m.charged, m.delay, m.reason_code) == (
        "retry_scheduled",
        False,
        Delay.UNAVAILABLE,
        "provider_error",
    )
    m = move_for(Outcome.TRANSIENT, ErrorClass.TRANSIENT, 503, circuit_open=True)
    assert (m.kind, m.charged, m.delay, m.reason_code) == (
        "provider_unavailable",
        False,
        Delay.CIRCUIT,
        circuit.REASON_UNAVAILABLE,
    )
    # A transient code the provider answered is the message's attempt: charged, then dead-lettered.
    m = move_for(Outcome.TRANSIENT, ErrorClass.TRANSIENT, 400)
    assert (m.kind, m.charged, m.delay) == ("retry_scheduled", True, Delay.RETRY)
    assert (m.otherwise.kind, m.otherwise.status, m.otherwise.reason_code, m.otherwise.dead_letter) == (
        "failed",
        Status.FAILED,
        "retries_exhausted",
        True,
    )
    m = move_for(Outcome.REJECTED, ErrorClass.ACCOUNT_FAULT, 401)
    assert (m.kind, m.status, m.charged, m.delay, m.reason_code) == (
        "held",
        Status.QUEUED,
        False,
        Delay.HOLD,
        holds.REASON_HELD,
    )
    m = move_for(Outcome.REJECTED, ErrorClass.OPTED_OUT, 400)
    assert (m.kind, m.status, m.reason_code, m.opt_out, m.dead_letter) == (
        "failed",
        Status.FAILED,
        "opted_out",
        True,
        True,
    )
    m = move_for(Outcome.REJECTED, ErrorClass.PERMANENT, 400)
    assert (m.reason_code, m.opt_out, m.dead_letter) == ("provider_rejected", False, True)


def test_a_submission_held_back_at_its_slot():
    """Unsent because its campaign halted: back to waiting, uncharged; unsent for another reason (the
    circuit opened meanwhile): the provider's unavailability, uncharged too."""
    assert answer_of(NOT_SENT, halted=True, circuit_open=False) == Answer.HALTED
    m = submit_move(NOT_SENT, halted=True, circuit_open=False)
    assert (m.kind, m.status, m.charged, m.delay) == ("campaign_paused", Status.QUEUED, False, Delay.NOW)
    m = submit_move(NOT_SENT, halted=False, circuit_open=True)
    assert (m.kind, m.charged) == ("provider_unavailable", False)


def test_only_moves_that_end_or_retry_the_message_for_its_own_fault_are_charged():
    for move in {*SUBMIT_MOVES.values(), *RECEIPT_MOVES.values()}:
        if move.status == Status.QUEUED:
            assert move.charged == (move.delay == Delay.RETRY), move
        else:
            assert move.charged, move
        assert outcomes.attempt_count_after(3, move) == (3 if move.charged else 2)
    assert outcomes.attempt_count_after(0, outcomes.THROTTLED) == 0


def test_receipt_rows():
    row = RECEIPT_MOVES[("failed", ErrorClass.THROTTLED)]
    assert (row.kind, row.status, row.charged, row.delay, row.reason_code) == (
        "throttled",
        Status.QUEUED,
        False,
        Delay.THROTTLE,
        "provider_throttled",
    )
    assert (row.otherwise.status, row.otherwise.reason_code) == (Status.FAILED, "provider_failed")
    row = RECEIPT_MOVES[("failed", ErrorClass.TRANSIENT)]
    assert (row.kind, row.charged, row.delay, row.otherwise.reason_code) == (
        "retry_scheduled",
        True,
        Delay.RETRY,
        "provider_failed",
    )
    assert RECEIPT_MOVES[("failed", ErrorClass.ACCOUNT_FAULT)].kind == "held"
    assert RECEIPT_MOVES[("undelivered", ErrorClass.OPTED_OUT)].opt_out
    assert RECEIPT_MOVES[("undelivered", ErrorClass.PERMANENT)].reason_code == "provider_undelivered"
    assert {RECEIPT_MOVES[("canceled", cls)].reason_code for cls in CLASSES} == {"provider_canceled"}
    assert RECEIPT_MOVES[("delivered", None)].reason_code is None  # a delivery leaves the reason alone


def test_delays(settings):
    settings.THROTTLE_BASE_SECONDS, settings.THROTTLE_MAX_DELAY_SECONDS = 1.0, 60.0
    settings.RETRY_BASE_SECONDS, settings.RETRY_MAX_DELAY_SECONDS = 2.0, 30.0
    assert 4.0 <= delays.throttle_delay(uncharged_calls=3) <= 8.0
    assert delays.throttle_delay(uncharged_calls=0, retry_after=45) == 45
    assert 30.0 <= delays.throttle_delay(uncharged_calls=99) <= 60.0
    assert 1.0 <= delays.unavailable_delay(uncharged_calls=-1) <= 2.0
    assert 15.0 <= delays.unavailable_delay(uncharged_calls=10) <= 30.0
    assert delays.unavailable_delay(uncharged_calls=0, retry_after=100) == 100
    assert delays.receipt_retry_delay(1) == timedelta(seconds=1)
    assert delays.receipt_retry_delay(50) == timedelta(seconds=60)
    now = timezone.now()
    decision = delays.retry_decide(
        attempt_number=1, now=now, first_due=now, expires_at=now + timedelta(hours=1)
    )
    assert decision.retry and now + timedelta(seconds=1) <= decision.run_after <= now + timedelta(seconds=2)


@pytest.mark.django_db
def test_a_batch_mixing_charged_and_uncharged_retries_records_each_as_its_row_says(
    adapter, sandbox, settings
):
    """A 5xx (uncertain: looked up before any resend, https://www.twilio.com/docs/api/errors/20500) and a
    transient code the provider answered (charged) land in one batch, in either order: each is recorded as
    its row says."""
    settings.RETRY_BASE_SECONDS = 0.0
    tenant = tenant_with_key("acme")[0]
    for first, second in (("500", "400"), ("400", "500")):
        msgs = []
        for i, action in enumerate((first, second)):
            to = recipient(40 + i + (0 if first == "500" else 10))
            rule = {"to": to, "action": action, "times": 1}
            if action == "400":
                rule["error_code"] = 30008  # transient in Twilio's table
            sandbox.config(rules=[*sandbox_rules(msgs), rule])
            msg = message(tenant, to=to)
            transitions.transition(
                msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued"
            )
            msgs.append((msg, rule))
        sending.send_batch([m.pk for m, _ in msgs])
        for msg, rule in msgs:
            msg = Message.objects.get(pk=msg.pk)
            event = msg.events.order_by("id").last()
            if rule["action"] == "400":
                assert msg.status == Status.QUEUED and msg.reason_code == "provider_error"
                assert (msg.attempt_count, msg.provider_calls) == (1, 1), rule
                assert event.kind == "retry_scheduled"
                assert event.details.get("charged", True) is True, event.details
            else:
                assert msg.status == Status.SENDING and msg.reason_code == "submission_uncertain"
                assert (msg.attempt_count, msg.provider_calls) == (1, 1), rule
                assert event.kind == "attempt_uncertain"
                assert msg.attempts.get().outcome == AttemptOutcome.UNCERTAIN


def sandbox_rules(msgs):
    return [rule for _, rule in msgs]
