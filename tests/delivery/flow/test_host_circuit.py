"""The circuit tells a provider that fails from a host that cannot reach it (delivery.flow.circuit): failures
with no answer at all count against the host's own circuit while another host gets answers, and against
the account's only when no host does. In-process, against the real sandbox through the real adapter; the
other host is its circuit row, as that host's workers leave it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from delivery.flow import circuit, host_circuit
from delivery.models import Attempt, AttemptOutcome, ProviderCircuit, ProviderHostCircuit
from delivery.outcomes import table as outcomes
from delivery.providers import get_adapter
from delivery.providers.base import ErrorClass, Outcome, SubmitResult
from delivery.sending import health, reconcile
from delivery.sending import worker as sending
from scheduling.lifecycle import transitions
from scheduling.models import Message, MessageEvent, Status
from tests.factories import SENDER, message, recipient, tenant_with_key

pytestmark = pytest.mark.django_db

DEAD = "http://127.0.0.1:9"  # nothing listens on the discard port: connection refused
REFUSED = SubmitResult(
    outcome=Outcome.TRANSIENT,
    error_message="ClientConnectorError",
    error_class=ErrorClass.TRANSIENT,
    latency_ms=2.0,
)
READ_TIMEOUT = SubmitResult(outcome=Outcome.UNCERTAIN, error_message="TimeoutError", latency_ms=2000.0)
ANSWERED_500 = SubmitResult(outcome=Outcome.UNCERTAIN, http_status=500, error_code="20500", latency_ms=40.0)
THROTTLED = SubmitResult(
    outcome=Outcome.TRANSIENT, http_status=429, error_code="20429", error_class=ErrorClass.THROTTLED
)
ACCEPTED = SubmitResult(outcome=Outcome.ACCEPTED, provider_message_id="SM1", http_status=201, latency_ms=30.0)


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


@pytest.fixture
def here(settings):
    settings.HOST_ID = "host-b"
    settings.CIRCUIT_MIN_FAILURES = 5
    settings.HOST_CIRCUIT_PROBE_SECONDS = 2.0
    settings.HOST_CIRCUIT_PROBE_MAX_SECONDS = 30.0
    return "host-b"


def another_host_answered(adapter, *, ago: float = 1.0, host: str = "host-a") -> None:
    now = timezone.now()
    ProviderHostCircuit.objects.update_or_create(
        provider=adapter.name,
        account=adapter.account,
        host=host,
        defaults={
            "last_answer_at": now - timedelta(seconds=ago),
            "window_started_at": now,
            "updated_at": now,
        },
    )


def host_row(adapter, host: str = "host-b") -> ProviderHostCircuit:
    return ProviderHostCircuit.objects.get(provider=adapter.name, account=adapter.account, host=host)


def account_open(adapter) -> bool:
    return circuit.circuit_state(adapter.name, adapter.account).is_open


def report(adapter, results: list[SubmitResult]):
    rows = [{"reason_code": "", "from_number": SENDER, "sender_pool": ""} for _ in results]
    return health.answers_report(adapter, rows, results)


def queued(tenant, to) -> Message:
    msg = message(tenant, to=to)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    return msg


def dead_provider(settings):
    settings.TWILIO_API_BASE_URL = DEAD
    get_adapter.cache_clear()
    return get_adapter()


# --- which failures got an answer -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (REFUSED, True),  # connection refused or timed out: the request never left
        (READ_TIMEOUT, True),  # written, no answer: uncertain, and nothing came back either
        (ANSWERED_500, False),  # the provider answered: it is failing, not unreachable
        (SubmitResult(outcome=Outcome.UNCERTAIN, http_status=200), False),  # an unreadable answer
        (SubmitResult(outcome=Outcome.TRANSIENT, http_status=503, error_class=ErrorClass.TRANSIENT), False),
        (THROTTLED, False),  # not a provider failure at all (the rate is lowered instead)
        (ACCEPTED, False),
        (SubmitResult(outcome=Outcome.TRANSIENT, sent=False), False),  # never sent: says nothing
        # An adapter may say so itself, whatever the HTTP status it recorded.
        (SubmitResult(outcome=Outcome.UNCERTAIN, answered=True), False),
        (SubmitResult(outcome=Outcome.UNCERTAIN, http_status=502, answered=False), True),
    ],
)
def test_a_failure_is_unanswered_only_when_no_answer_came_back(result, expected):
    assert outcomes.unanswered(result) is expected


# --- which circuit hears of it ----------------------------------------------------------------------------
def test_one_host_cut_off_opens_its_own_circuit_and_not_the_accounts(adapter, here):
    another_host_answered(adapter)
    state = report(adapter, [REFUSED] * 3 + [READ_TIMEOUT] * 3)
    assert not state.is_open and not account_open(adapter), "the other host reaches the provider"
    row = host_row(adapter)
    assert row.state == circuit.OPEN and row.window_failed == 6 and row.opened_at is not None
    assert row.next_probe_at == row.opened_at + timedelta(seconds=2)
    assert host_circuit.host_seen_open(adapter.name, adapter.account), "this process knows at once"
    account = ProviderCircuit.objects.filter(provider=adapter.name, account=adapter.account).first()
    assert account is None or (account.window_failed == 0 and account.opened_at is None)
    # The other host's circuit is untouched: it goes on sending.
    assert host_row(adapter, "host-a").state == circuit.CLOSED


def test_no_answer_on_every_host_that_tried_is_the_providers_and_opens_the_account_circuit(adapter, here):
    another_host_answered(adapter, ago=60)  # long before the window: it has not reached it lately either
    state = report(adapter, [REFUSED] * 6)
    assert state.is_open and account_open(adapter)
    row = host_row(adapter)
    assert row.state == circuit.CLOSED and row.window_failed == 0, "not this host's own: the account's"


def test_a_single_host_counts_unanswered_failures_against_the_account_as_before(adapter, here):
    state = report(adapter, [READ_TIMEOUT] * 5)
    assert state.is_open
    assert host_row(adapter).state == circuit.CLOSED


def test_answered_failures_feed_the_account_circuit_even_while_another_host_gets_answers(adapter, here):
    another_host_answered(adapter)
    state = report(adapter, [ANSWERED_500] * 6)
    assert state.is_open, "a failing provider: every host should back off"
    assert not ProviderHostCircuit.objects.filter(host="host-b", state=circuit.OPEN).exists()


def test_answers_tell_the_other_hosts_this_one_reaches_the_provider(adapter, here, monkeypatch):
    monkeypatch.setattr(circuit, "OK_FLUSH_SECONDS", 0.0)
    report(adapter, [ACCEPTED] * 3)  # buffered in this process
    report(adapter, [THROTTLED, ACCEPTED])  # written
    row = host_row(adapter)
    assert row.window_ok == 5 and row.last_answer_at is not None
    assert host_circuit.others_answered(adapter.name, adapter.account, host="host-a", now=timezone.now())
    assert not host_circuit.others_answered(adapter.name, adapter.account, host="host-b", now=timezone.now())


def test_the_host_circuit_probes_after_a_backoff_that_doubles_and_closes_on_an_answer(adapter, here):
    another_host_answered(adapter)
    report(adapter, [REFUSED] * 5)
    row = host_row(adapter)
    opened = row.opened_at
    assert not host_circuit.host_probe_take(adapter.name, adapter.account, now=opened + timedelta(seconds=1))
    due = opened + timedelta(seconds=2)
    assert host_circuit.host_probe_take(adapter.name, adapter.account, now=due)
    assert not host_circuit.host_probe_take(adapter.name, adapter.account, now=due), "one probe per turn"
    # The probe got no answer either: the next one waits twice as long.
    host_circuit.host_report(
        provider=adapter.name,
        account=adapter.account,
        answered=0,
        unanswered=1,
        probe_unanswered=True,
        now=due,
    )
    row = host_row(adapter)
    assert row.state == circuit.OPEN and row.failed_probes == 1
    assert row.next_probe_at == due + timedelta(seconds=4)
    # Late answers to requests sent before it opened (not its probe) prove nothing about now.
    report(adapter, [ACCEPTED] * 3)
    assert host_row(adapter).state == circuit.OPEN
    host_circuit.host_report(
        provider=adapter.name, account=adapter.account, answered=1, unanswered=0, probe_answered=True
    )
    row = host_row(adapter)
    assert row.state == circuit.CLOSED and row.probes == 1 and row.next_probe_at is None
    assert not host_circuit.host_seen_open(adapter.name, adapter.account)


def test_an_operator_closes_a_host_circuit(adapter, here):
    another_host_answered(adapter)
    report(adapter, [REFUSED] * 5)
    assert host_circuit.host_circuit_close(adapter.name, adapter.account, "host-b", actor="admin:ops")
    assert host_row(adapter).state == circuit.CLOSED
    assert not host_circuit.host_circuit_close(adapter.name, adapter.account, "host-b")


# --- the send worker on a cut host ----------------------------------------------------------------------
def test_a_cut_host_sends_its_batches_back_uncharged_hands_them_over_and_probes_with_one_message(
    adapter, sandbox, tenant, here, settings, django_capture_on_commit_callbacks
):
    another_host_answered(adapter)
    msgs = [queued(tenant, recipient(100 + i)) for i in range(6)]
    dead = dead_provider(settings)
    sending.send_batch([m.pk for m in msgs])
    assert host_row(dead).state == circuit.OPEN and not account_open(dead)
    for m in msgs:
        m.refresh_from_db()
        assert m.status == Status.QUEUED and m.attempt_count == 0, "uncharged: not the message's fault"
    assert not MessageEvent.objects.filter(message__in=msgs, kind="provider_unavailable").exists()

    # While the host circuit is open and its probe not due: the batch is published again as it is, for a
    # worker of the host that reaches the provider (not parked: its release slots are not spent twice).
    ids = [m.pk for m in msgs]
    Message.objects.filter(pk__in=ids).update(run_after=timezone.now() + timedelta(seconds=120))
    with django_capture_on_commit_callbacks() as published:
        report_ = sending.send_batch(ids)
    assert report_.claimed == 0 and report_.held == 0 and len(published) == 1
    handed = Message.objects.filter(pk__in=ids)
    assert set(handed.values_list("status", "reason_code")) == {(Status.QUEUED, "host_unreachable")}
    assert all(m.run_after > timezone.now() + timedelta(seconds=60) for m in handed), "run_after kept"
    entries = MessageEvent.objects.filter(message__in=msgs, kind="host_unreachable")
    assert entries.count() == 6 and {e.details["host"] for e in entries} == {"host-b"}
    sending.send_batch(ids)  # handed over again: no second entry
    assert MessageEvent.objects.filter(message__in=msgs, kind="host_unreachable").count() == 6

    # No other host has reached the provider lately: nobody to hand over to; parked briefly instead.
    another_host_answered(adapter, ago=60)
    report_ = sending.send_batch(ids)
    assert report_.claimed == 0 and report_.held == 6
    limit = timezone.now() + timedelta(seconds=settings.HOST_CIRCUIT_PARK_SECONDS)
    assert all(m.run_after <= limit for m in Message.objects.filter(pk__in=ids))

    # The provider is reachable again and the probe is due: one message goes, its answer closes it.
    settings.TWILIO_API_BASE_URL = sandbox.base_url
    get_adapter.cache_clear()
    ProviderHostCircuit.objects.filter(host="host-b").update(next_probe_at=timezone.now())
    report_ = sending.send_batch([m.pk for m in msgs])
    assert report_.claimed == 1 and sandbox.stats()["submissions"] == 1
    probe = Message.objects.get(pk__in=[m.pk for m in msgs], status=Status.SENT)
    assert probe.events.filter(kind="host_probe", details__host="host-b").exists()
    assert host_row(dead).state == circuit.CLOSED and host_row(dead).probes == 1
    report_ = sending.send_batch([m.pk for m in msgs])
    assert report_.claimed == 5 and sandbox.stats()["submissions"] == 6
    assert set(
        Message.objects.filter(pk__in=[m.pk for m in msgs]).values_list("attempt_count", flat=True)
    ) == {1}


def test_reconciliation_does_not_wait_for_a_host_circuit(adapter, sandbox, tenant, here):
    """A host circuit is that host's send workers' business: uncertain submissions are looked up (by
    whichever process runs the reconciler) as long as the account's circuit is closed."""
    another_host_answered(adapter)
    report(adapter, [READ_TIMEOUT] * 5)
    assert host_row(adapter).state == circuit.OPEN
    msg = queued(tenant, recipient(200))
    transitions.transition(
        msg.pk, from_statuses=[Status.QUEUED], to_status=Status.SENDING, kind="attempt_started"
    )
    Attempt.objects.create(
        message=msg,
        number=1,
        provider=adapter.name,
        idempotency_token=f"t{msg.pk}",
        started_at=timezone.now() - timedelta(seconds=5),
        outcome=AttemptOutcome.UNCERTAIN,
    )
    outcome = reconcile.reconcile_many([msg.pk])
    assert outcome == {"absent_once": 1}, "looked up, not skipped"
