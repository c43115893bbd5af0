"""Pacing, the circuit breaker, fairness, disabled tenants and quiet hours for retries, across real processes
(celery beat, sweep and send workers, the sandbox provider). Each test states the final state of every
message, and what the provider holds for it, and checks it."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from bench.harness.devprocs import SEND_QUEUES
from delivery.models import AccountCapacity, Attempt, AttemptOutcome, ProviderCircuit, SenderCapacity
from scheduling.dispatch.quiet import QuietWindow
from scheduling.lifecycle import transitions
from scheduling.models import Message, MessageEvent, Status
from smsgw.models import Tenant
from tests.factories import SENDER, message, messages_bulk, recipient, tenant_with_key
from tests.harness import Pipeline
from tests.processes import broker_purge
from tests.sandbox_process import SandboxProcess

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PROVIDER = "twilio"


def statuses(pks) -> dict[str, int]:
    return dict(Counter(Message.objects.filter(pk__in=pks).values_list("status", flat=True)))


def sent_once_each(pipeline: Pipeline, pks) -> None:
    """Every message ``sent``, each held exactly once by the provider, under the sid the message records."""
    msgs = list(Message.objects.filter(pk__in=pks))
    assert len(msgs) == len(pks)
    assert Counter(m.status for m in msgs) == {Status.SENT: len(pks)}, statuses(pks)
    stored = pipeline.sandbox.list_messages(page_size=1000)
    per_to = Counter(m.to for m in stored)
    missing = [m.to for m in msgs if per_to[m.to] == 0]
    assert not missing, f"{len(missing)} messages recorded sent that the provider never got"
    twice = {m.to: per_to[m.to] for m in msgs if per_to[m.to] > 1}
    assert not twice, f"{len(twice)} messages submitted more than once: {dict(list(twice.items())[:5])}"
    sid_by_to = {m.to: m.sid for m in stored}
    wrong = [m.pk for m in msgs if sid_by_to[m.to] != m.provider_message_id]
    assert not wrong, f"{len(wrong)} messages record another sid than the provider's"


def events_per_message(pks, kind: str) -> Counter:
    return Counter(
        MessageEvent.objects.filter(message_id__in=pks, kind=kind).values_list("message_id", flat=True)
    )


# --- 1. limits hold with several sweepers and send processes ----------------------------------------
SENDERS = ("+14155550100", "+14155550101", "+14155550102")
SENDER_RATE = 10.0  # segments/s, configured in smsgw and enforced by the sandbox alike
# The most submissions a sender may get in any sliding second: its rate, 5% for timing noise, plus one.
MAX_IN_ANY_SECOND = SENDER_RATE * 1.05 + 1
WARM_SENDER = "+14155550103"


def max_in_any_second(instants: list[float]) -> int:
    instants = sorted(instants)
    best, first = 0, 0
    for last, t in enumerate(instants):
        while t - instants[first] >= 1.0:
            first += 1
        best = max(best, last - first + 1)
    return best


def submission_lags(sandbox: SandboxProcess, pks) -> str:
    """For a failure message, per sender: the most first releases (``queued_at``) in any sliding second,
    and how long submissions took from their release to the provider."""
    msgs = {m.to: m for m in Message.objects.filter(pk__in=pks)}
    lags: dict[str, list[float]] = {}
    released: dict[str, list[float]] = {}
    for created, sender, _segments, to in sandbox.submissions(0):
        m = msgs.get(to)
        if m is None or m.queued_at is None:
            continue
        lags.setdefault(sender, []).append(created - m.queued_at.timestamp())
        released.setdefault(sender, []).append(m.queued_at.timestamp())
    return "; ".join(
        f"{s}: most released in any 1 s {max_in_any_second(released[s])}, release->provider lag max "
        f"{max(v):.2f} s, p50 {sorted(v)[len(v) // 2]:.2f} s"
        for s, v in sorted(lags.items())
    )


def _due_over_senders(tenant: Tenant) -> list[int]:
    """150 messages due now, 50 per sender (one transaction: no sweep sees them before their sender)."""
    with transaction.atomic():
        before = set(Message.objects.filter(tenant=tenant).values_list("pk", flat=True))
        pks = [pk for pk in messages_bulk(tenant, 150, due_at=timezone.now()) if pk not in before]
        for i, sender in enumerate(SENDERS):
            Message.objects.filter(pk__in=pks[i :: len(SENDERS)]).update(from_number=sender)
    return pks


def _sender_rates_scenario(pipeline: Pipeline, *, warm: bool) -> None:
    sandbox = pipeline.sandbox
    for sender in SENDERS:
        SenderCapacity.objects.create(
            provider=PROVIDER, account=sandbox.account_sid, sender=sender, segments_per_second=SENDER_RATE
        )
    tenant, _ = tenant_with_key("acme")
    warm_pks: list[int] = []
    if warm:
        # Every process up and each send process past its first tasks before the measured load: 40
        # messages of another sender, released at 20/s (about 40 small send tasks).
        SenderCapacity.objects.create(
            provider=PROVIDER, account=sandbox.account_sid, sender=WARM_SENDER, segments_per_second=20
        )
        warm_pks = messages_bulk(tenant, 40, due_at=timezone.now())
        for i, pk in enumerate(warm_pks):
            Message.objects.filter(pk=pk).update(from_number=WARM_SENDER, to=recipient(1000 + i))
    else:
        sandbox.config(sender_rate=SENDER_RATE, queue_max_seconds=1)
        pks = _due_over_senders(tenant)
    connection.close()
    pipeline.worker("s1", queues="sweep", concurrency=1)
    pipeline.worker("s2", queues="sweep", concurrency=1)
    pipeline.worker("send", queues=SEND_QUEUES, concurrency=3)
    pipeline.beat("b1")
    pipeline.beat("b2")
    if warm:
        pipeline.wait_all_final(warm_pks, timeout=60)
        sandbox.config(sender_rate=SENDER_RATE, queue_max_seconds=1)
        pks = _due_over_senders(tenant)
        connection.close()
    started = time.monotonic()
    pipeline.wait_all_final(pks, timeout=60)
    elapsed = time.monotonic() - started

    sent_once_each(pipeline, pks + warm_pks)
    stats = sandbox.stats()
    figures = {s: stats["senders"][s]["max_submitted_in_any_1s"] for s in SENDERS}
    detail = f"max submitted in any sliding 1 s per sender {figures}; {submission_lags(sandbox, pks)}"
    assert {s: stats["senders"][s]["submitted"] for s in SENDERS} == dict.fromkeys(SENDERS, 50)
    # 50 per sender at 10/s cannot all go at once: most waited, and said so once each.
    paced = events_per_message(pks, "paced")
    assert len(paced) >= 100, f"only {len(paced)} messages waited: the limits were never exercised"
    # One entry per wait, not per sweep: a second only after the provider refused it and it waited again.
    refused = Counter(
        Attempt.objects.filter(message_id__in=pks, outcome=AttemptOutcome.THROTTLED).values_list(
            "message_id", flat=True
        )
    )
    extra = {pk: n for pk, n in paced.items() if n > 1 + refused[pk]}
    assert not extra, f"messages with more paced entries than waits: {extra}"
    assert set(Message.objects.filter(pk__in=pks).values_list("reason_code", flat=True)) == {""}
    assert set(Message.objects.filter(pk__in=pks).values_list("attempt_count", flat=True)) == {1}
    if warm:
        assert stats["rejections"] == {}, f"the provider refused submissions {stats['rejections']}; {detail}"
        assert all(n <= MAX_IN_ANY_SECOND for n in figures.values()), f"limit {MAX_IN_ANY_SECOND}: {detail}"
    else:
        # Send processes that are still starting lag behind the releases, and what they then submit
        # together can overflow the provider's one-second queue: each refusal (21611) is throttled,
        # not charged (attempt_count stays 1 above), and the message is sent later, once.
        throttled = Attempt.objects.filter(message_id__in=pks, outcome=AttemptOutcome.THROTTLED).count()
        assert throttled == sum(stats["rejections"].values()), detail
    print(f"rates ({'warm' if warm else 'cold'}): 150 messages in {elapsed:.1f} s; {detail}")


# Submissions are counted per sliding second: a send process a neighbour's CPU load stalls would submit a
# burst when it runs again, which is the neighbour's doing, not the pacing's.
RATES_SERIAL = "counts submissions per sliding second: a neighbour's CPU load would bunch them"


@pytest.mark.serial(reason=RATES_SERIAL)
def test_sender_rates_hold_with_two_sweepers_and_three_send_processes(pipeline):
    """Three senders at 10 segments/s each, configured through SenderCapacity; the sandbox queues one second
    per sender at the same rate and refuses anything beyond (400/21611). With every process running (and
    warmed by another sender's traffic), 150 one-segment messages become due at once, 50 per sender,
    released by two sweeps running at the same time (two sweeper workers, two beats) and submitted by three
    send processes. Final state: all 150 ``sent``, each submitted once, no 21611 (nor any other refusal),
    no sender above its rate in any sliding second (5% tolerance plus one); the messages that had to wait
    carry one ``paced`` entry each, every ``reason_code`` ends empty and every ``attempt_count`` is 1."""
    _sender_rates_scenario(pipeline, warm=True)


@pytest.mark.serial(reason=RATES_SERIAL)
def test_sender_rates_hold_when_the_processes_start_with_the_messages_already_due(pipeline):
    """The same 150 messages and limits, already due when the sweepers, the send processes and the beats
    start (a deploy or restart with a backlog). Releases keep the rates from the first second; the send
    processes, still starting, may lag and submit a few seconds' releases together, which the provider's
    queue may refuse: then every refusal is throttled, uncharged, and sent later. Final state: all 150
    sent once, every attempt_count 1, one paced entry at most each."""
    _sender_rates_scenario(pipeline, warm=False)


# --- 2. the circuit breaker ------------------------------------------------------------------------
CIRCUIT_ENV = {
    "SMSGW_CIRCUIT_PROBE_SECONDS": "1",
    "SMSGW_CIRCUIT_MIN_FAILURES": "5",
    "SMSGW_CIRCUIT_PARK_SECONDS": "30",
}
CIRCUIT_RATE = 40.0  # the sender's rate: 400 messages take 10 s, so the outage starts mid-stream


def test_circuit_opens_probes_once_a_second_and_closes_without_costing_messages(transactional_db):
    """400 messages at 40 segments/s; once 50 are sent the provider answers every call 503/20503. The
    circuit opens; the due messages wait as ``provider_unavailable`` (one entry each; a message used as a
    probe gets one more per failed probe), and the provider sees about one probe per second, nothing more.
    When the provider is back, the next probe closes the circuit and sending resumes within a few seconds.
    Final state: all 400 ``sent``, each submitted exactly once, none ``failed``, every ``attempt_count`` 1
    (an outage costs no attempt), the circuit ``closed`` with at least one probe recorded."""
    broker_purge()
    connection.close()
    with SandboxProcess(control_port=0) as sandbox:
        pipeline = Pipeline(sandbox)
        pipeline.env.update(CIRCUIT_ENV)
        try:
            SenderCapacity.objects.create(
                provider=PROVIDER,
                account=sandbox.account_sid,
                sender=SENDER,
                segments_per_second=CIRCUIT_RATE,
            )
            tenant, _ = tenant_with_key("acme")
            pks = messages_bulk(tenant, 400, due_at=timezone.now())
            connection.close()
            pipeline.worker("sweep", queues="sweep", concurrency=1)
            pipeline.worker("send", queues=SEND_QUEUES, concurrency=2)
            pipeline.beat()
            pipeline.wait_until(
                lambda: Message.objects.filter(pk__in=pks, status=Status.SENT).count() >= 50, 60, "50 sent"
            )
            sandbox.config(outage="503")
            sent_before = Message.objects.filter(pk__in=pks, status=Status.SENT).count()
            assert sent_before < 250, f"{sent_before} already sent: the outage came too late to matter"

            def circuit() -> ProviderCircuit | None:
                return ProviderCircuit.objects.filter(provider=PROVIDER, account=sandbox.account_sid).first()

            pipeline.wait_until(
                lambda: (
                    (c := circuit()) is not None
                    and c.state == "open"
                    and c.probes >= 1
                    and Message.objects.filter(pk__in=pks, reason_code="provider_unavailable").count() >= 100
                ),
                30,
                "the circuit open, a first probe, and the due messages waiting as provider_unavailable",
            )
            waiting = Message.objects.filter(pk__in=pks, reason_code="provider_unavailable")
            assert set(waiting.values_list("status", flat=True)) <= {Status.SCHEDULED, Status.QUEUED}

            # While open: about one submission per probe interval, nothing else reaches the provider.
            probes0 = circuit().probes
            outage0 = sandbox.stats()["by_outcome"]["outage_503"]
            t0 = time.monotonic()
            pipeline.wait_until(lambda: circuit().probes >= probes0 + 3, 30, "three more probes")
            elapsed = time.monotonic() - t0
            outage1 = sandbox.stats()["by_outcome"]["outage_503"]
            assert circuit().state == "open"
            allowance = elapsed / float(CIRCUIT_ENV["SMSGW_CIRCUIT_PROBE_SECONDS"]) + 2
            assert outage1 - outage0 <= allowance, (
                f"{outage1 - outage0} requests reached the provider in {elapsed:.1f} s while the circuit was "
                f"open (at most {allowance:.1f}: one probe per second)"
            )
            assert not Message.objects.filter(pk__in=pks, status=Status.FAILED).exists()

            recovered = time.time()
            sandbox.config(outage="none")
            pipeline.wait_until(lambda: sandbox.submissions(recovered), 30, "a submission after recovery")
            resumed_after = sandbox.submissions(recovered)[0][0] - recovered
            pipeline.wait_all_final(pks, timeout=90)

            sent_once_each(pipeline, pks)
            assert resumed_after <= 4.0, f"sending resumed {resumed_after:.1f} s after the provider came back"
            row = circuit()
            assert row.state == "closed" and row.probes >= 1, (row.state, row.probes)
            # One provider_unavailable entry per message that waited; a failed probe adds its own.
            unavailable = events_per_message(pks, "provider_unavailable")
            probed = Counter(
                MessageEvent.objects.filter(
                    message_id__in=pks, kind__in=["queued", "republished"], details__probe=True
                ).values_list("message_id", flat=True)
            )
            assert len(unavailable) >= 100, f"only {len(unavailable)} messages waited for the provider"
            too_many = {mid: n for mid, n in unavailable.items() if n > 1 + probed.get(mid, 0)}
            assert not too_many, f"extra provider_unavailable entries: {dict(list(too_many.items())[:5])}"
            assert sum(1 for mid, n in unavailable.items() if n == 1 and mid not in probed) >= 90
            print(
                f"circuit: {sent_before} sent before the outage, {len(unavailable)} waited, "
                f"{outage1 - outage0} requests in {elapsed:.1f} s while open, {row.probes} probes, "
                f"resumed {resumed_after:.2f} s after recovery"
            )
            # Last, so that a failure here comes after every other check: no attempt charged.
            attempts = Counter(Message.objects.filter(pk__in=pks).values_list("attempt_count", flat=True))
            charged = MessageEvent.objects.filter(message_id__in=pks, kind="retry_scheduled").count()
            uncharged = MessageEvent.objects.filter(
                message_id__in=pks, kind="provider_unavailable", from_status=Status.SENDING
            ).count()
            assert attempts == {1: 400}, (
                f"attempt_count per message {dict(attempts)}: {charged} failed requests were charged as "
                f"attempts (retry_scheduled), {uncharged} were not (provider_unavailable); an outage must "
                "cost no attempt"
            )
        finally:
            connection.close()
            pipeline.stop()
            broker_purge()


# --- 3. fairness between tenants -------------------------------------------------------------------
ACCOUNT_RATE = 40.0


def test_a_tenants_backlog_does_not_delay_another_tenants_messages(pipeline):
    """The account is capped at 40 segments/s (AccountCapacity), senders unlimited. Tenant A has 400 bulk
    messages due at once (a 10 s backlog); tenant B, once A is sending, has 10 bulk messages due 2 s later.
    B's messages take their turn: each is sent within 3 s of its due time while most of A's backlog still
    waits (``paced``). Final state: all 410 ``sent``, each submitted once."""
    AccountCapacity.objects.create(
        provider=PROVIDER, account=pipeline.sandbox.account_sid, segments_per_second=ACCOUNT_RATE
    )
    a, _ = tenant_with_key("tenant-a")
    b, _ = tenant_with_key("tenant-b")
    a_pks = messages_bulk(a, 400, due_at=timezone.now(), priority="bulk")
    connection.close()
    pipeline.worker("sweep", queues="sweep", concurrency=1)
    pipeline.worker("send", queues=SEND_QUEUES, concurrency=2)
    pipeline.beat()
    pipeline.wait_until(
        lambda: Message.objects.filter(pk__in=a_pks, status=Status.SENT).count() >= 20, 60, "A sending"
    )
    with transaction.atomic():
        b_pks = messages_bulk(b, 10, due_at=timezone.now() + timedelta(seconds=2), priority="bulk")
        for i, pk in enumerate(b_pks):
            Message.objects.filter(pk=pk).update(to=recipient(5000 + i))  # A has recipient(0..399)
    connection.close()

    snapshot: dict[str, int] = {}

    def b_done() -> bool:
        if Message.objects.filter(pk__in=b_pks).exclude(status=Status.SENT).exists():
            return False
        snapshot["a_unsent"] = Message.objects.filter(pk__in=a_pks).exclude(status=Status.SENT).count()
        snapshot["a_paced"] = Message.objects.filter(
            pk__in=a_pks, status=Status.SCHEDULED, reason_code="paced"
        ).count()
        return True

    pipeline.wait_until(b_done, 30, "B's 10 messages sent")
    lags = sorted((m.sent_at - m.due_at).total_seconds() for m in Message.objects.filter(pk__in=b_pks))
    assert lags[-1] <= 3.0, (
        f"B's lags (sent_at - due_at) {[round(x, 2) for x in lags]} s; A's backlog {snapshot}"
    )
    assert snapshot["a_unsent"] >= 200, f"A had only {snapshot['a_unsent']} left when B was done"
    assert snapshot["a_paced"] >= 150, f"A's backlog was not waiting paced: {snapshot}"

    pipeline.wait_all_final(a_pks, timeout=60)
    sent_once_each(pipeline, a_pks + b_pks)
    print(f"fairness: B lags {[round(x, 2) for x in lags]} s; A when B was done {snapshot}")


# --- 4. a disabled tenant ---------------------------------------------------------------------------
RECHECK = 3


def test_a_disabled_tenant_sends_nothing_and_resumes_when_enabled(pipeline):
    """A disabled tenant's 20 due messages stay ``scheduled``, reason ``tenant_disabled`` (one timeline
    entry each, however often they are looked at again), and the provider gets none of them. Enabled again,
    they are released at the next look: every 3 s here (SMSGW_DISABLED_TENANT_RECHECK_SECONDS; 30 in
    production), so a few looks happen while the tenant is disabled. Final state: all 20 ``sent``, each
    submitted once, reason cleared."""
    pipeline.env["SMSGW_DISABLED_TENANT_RECHECK_SECONDS"] = str(RECHECK)
    tenant, _ = tenant_with_key("acme", is_active=False)
    pks = messages_bulk(tenant, 20, due_at=timezone.now())
    connection.close()
    pipeline.worker()
    pipeline.beat()
    pipeline.wait_until(
        lambda: (
            Message.objects.filter(pk__in=pks, status=Status.SCHEDULED, reason_code="tenant_disabled").count()
            == 20
        ),
        60,
        "every message waiting as tenant_disabled",
    )
    # Looked at again while still disabled: still waiting, no second timeline entry.
    first_look = max(Message.objects.filter(pk__in=pks).values_list("run_after", flat=True))
    pipeline.wait_until(
        lambda: min(Message.objects.filter(pk__in=pks).values_list("run_after", flat=True)) > first_look,
        30,
        "every message looked at again",
    )
    assert pipeline.sandbox.submissions() == []
    assert Counter(events_per_message(pks, "tenant_disabled").values()) == {1: 20}

    Tenant.objects.filter(pk=tenant.pk).update(is_active=True)
    connection.close()
    pipeline.wait_all_final(pks, timeout=RECHECK + 30)
    sent_once_each(pipeline, pks)
    assert set(Message.objects.filter(pk__in=pks).values_list("reason_code", flat=True)) == {""}
    assert Counter(events_per_message(pks, "tenant_disabled").values()) == {1: 20}


# --- 5. quiet hours for a retry ----------------------------------------------------------------------
def test_a_retry_due_inside_quiet_hours_waits_for_the_windows_end(pipeline):
    """A retry (``queued``, attempt 1 spent, ``run_after`` now) whose message carries a quiet window that
    contains now and ends 10 minutes from now: the release step defers it to the window's end (reason
    ``quiet_hours``, a ``quiet_hours_deferred`` entry at stage ``retry``). A message without a window, due
    afterwards, is sent meanwhile (the pipeline kept sweeping). Final state within the test: the control
    message ``sent`` (the provider's only submission); the retry still ``queued``, ``run_after`` at the
    window's end, attempt count unchanged, never submitted."""
    tenant, _ = tenant_with_key("acme")
    now = timezone.now().astimezone(UTC)
    start = (now - timedelta(hours=1)).time().replace(microsecond=0, second=0)
    end = (now + timedelta(minutes=10)).time().replace(microsecond=0, second=0)
    window = QuietWindow(start, end, "UTC")
    assert window.contains(now)
    expected_end = window.end_after(now)
    assert expected_end - now >= timedelta(minutes=5)
    msg = message(tenant, due_in=-5)
    Message.objects.filter(pk=msg.pk).update(quiet_start=start, quiet_end=end, quiet_timezone="UTC")
    result = transitions.transition(
        msg.pk,
        from_statuses=[Status.SCHEDULED],
        to_status=Status.QUEUED,
        kind="retry_scheduled",
        set_fields={
            "run_after": timezone.now(),
            "queued_at": timezone.now(),
            "attempt_count": 1,
            "reason_code": "provider_error",
            "status_reason": "transient: 500; retry",
        },
    )
    assert result.won
    connection.close()
    pipeline.worker()
    pipeline.beat()
    pipeline.wait_until(
        lambda: Message.objects.filter(pk=msg.pk, reason_code="quiet_hours").exists(),
        60,
        "the retry deferred by quiet hours",
    )
    msg.refresh_from_db()
    assert msg.status == Status.QUEUED
    assert msg.run_after == expected_end, (msg.run_after, expected_end)
    events = list(MessageEvent.objects.filter(message_id=msg.pk, kind="quiet_hours_deferred"))
    assert len(events) == 1 and events[0].details["stage"] == "retry", [e.details for e in events]
    assert datetime.fromisoformat(events[0].details["new_due_at"]) == expected_end
    # A control message due now, without a window, is sent: the pipeline kept sweeping, and the deferred
    # retry still did not go.
    control = message(tenant, due_in=0, to="+14155550199")
    connection.close()
    pipeline.wait_all_final([control.pk], timeout=30)
    assert [row[3] for row in pipeline.sandbox.submissions()] == ["+14155550199"]
    assert pipeline.sandbox.list_messages(to=msg.to) == []
    msg.refresh_from_db()
    assert (msg.status, msg.run_after, msg.attempt_count) == (Status.QUEUED, expected_end, 1)
    assert msg.reason_code == "quiet_hours"
    assert not Attempt.objects.filter(message_id=msg.pk).exists()
