"""The restore fence (delivery/sending/fence.py, docs/restore.md): which messages a restored database must
settle with the provider before sending them, that the fence runs once per backup time, that a bad backup
time is refused, and what the reconciler then makes of a fenced message: found at the provider (sent under
that sid, never again), proven absent only past the fence's own bound (sent once), found twice (ambiguous,
never resent). Against the real sandbox through the real Twilio adapter; PostgreSQL and SQLite halves."""

from __future__ import annotations

import io
import secrets
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from delivery.models import Attempt, AttemptOutcome
from delivery.sending import fence, reconcile
from delivery.sending import worker as sending
from scheduling.lifecycle import transitions
from scheduling.models import Message, MessageEvent, Status
from tests.delivery.sending.test_worker import past_absence_bound
from tests.factories import message, recipient, tenant_with_key

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

ACTOR = "operator:test"


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


def in_status(tenant, to: str, status: str, *, due_in: float = -60) -> Message:
    """A message as a restore could bring it back: ``status`` with its columns as the lifecycle leaves them
    (a `sending` one with its pending attempt, as a worker that died in the provider call leaves it)."""
    msg = message(tenant, to=to, due_in=due_in, body=f"restored {to}")
    if status == Status.SCHEDULED:
        return msg
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    if status == Status.QUEUED:
        return msg
    started = timezone.now() - timedelta(seconds=30)
    transitions.transition(
        msg.pk,
        from_statuses=[Status.QUEUED],
        to_status=Status.SENDING,
        kind="attempt_started",
        set_fields={"attempt_count": 1, "provider_calls": 1, "run_after": started + timedelta(minutes=5)},
    )
    Attempt.objects.create(
        message=msg, number=1, provider=msg.provider, idempotency_token="t", started_at=started
    )
    if status == Status.SENDING:
        return msg
    sid = "SM" + secrets.token_hex(16)
    transitions.transition(
        msg.pk,
        from_statuses=[Status.SENDING],
        to_status=status,
        kind=status,
        set_fields={"provider_message_id": sid, "run_after": None},
    )
    Attempt.objects.filter(message=msg).update(outcome=AttemptOutcome.ACCEPTED, provider_message_id=sid)
    return msg


def test_the_fence_takes_what_could_have_left_and_leaves_the_rest(tenant):
    now = timezone.now()
    since = now - timedelta(minutes=10)
    fenced = {
        "scheduled_due": in_status(tenant, recipient(1), Status.SCHEDULED, due_in=-5),
        "scheduled_due_before_backup": in_status(tenant, recipient(2), Status.SCHEDULED, due_in=-3600),
        "queued": in_status(tenant, recipient(3), Status.QUEUED),
        "sending": in_status(tenant, recipient(4), Status.SENDING),
    }
    later = in_status(tenant, recipient(5), Status.SCHEDULED, due_in=600)
    # Due, but waiting for a person (a paused campaign, a review): only their act could have released it.
    awaiting = [in_status(tenant, recipient(7 + i), Status.SCHEDULED, due_in=-30) for i in range(2)]
    for msg, code in zip(awaiting, ["campaign_paused", "held_for_review"], strict=True):
        Message.objects.filter(pk=msg.pk).update(reason_code=code, run_after=now + timedelta(hours=1))
    # Waiting past its due time for a reason (a hold): released the moment the reason ended.
    waiting = in_status(tenant, recipient(6), Status.SCHEDULED, due_in=-30)
    Message.objects.filter(pk=waiting.pk).update(run_after=now + timedelta(hours=1))
    fenced["scheduled_waiting"] = waiting
    final = {
        s: in_status(tenant, recipient(10 + i), s) for i, s in enumerate([Status.SENT, Status.DELIVERED])
    }
    cancelled = message(tenant, to=recipient(20), due_in=-60)
    transitions.transition(
        cancelled.pk, from_statuses=[Status.SCHEDULED], to_status=Status.CANCELLED, kind="cancelled"
    )
    for msg in [*fenced.values(), later, *awaiting, cancelled, *final.values()]:
        msg.refresh_from_db()
    was = {name: msg.status for name, msg in fenced.items()}
    assert was["scheduled_waiting"] == Status.SCHEDULED and was["sending"] == Status.SENDING
    before = {m.pk: (m.status, m.version) for m in [later, *awaiting, cancelled, *final.values()]}

    dead_worker_started = fenced["sending"].attempts.get().started_at
    report = fence.messages_fence(since=since, actor=ACTOR, now=now, batch_size=2)

    assert report.fenced == {"scheduled": 3, "queued": 1, "sending": 1} and report.total == 5
    assert (report.already_fenced, report.moved_meanwhile, report.not_due, report.batches) == (0, 0, 3, 3)
    for name, msg in fenced.items():
        msg.refresh_from_db()
        assert (msg.status, msg.run_after, msg.reason_code) == (
            Status.SENDING,
            now,
            "submission_uncertain",
        ), name
        event = msg.events.get(kind="fenced")
        assert (event.from_status, event.to_status, event.actor) == (was[name], Status.SENDING, ACTOR)
        assert event.details["backup_time"] == since.isoformat()
        attempt = msg.attempts.order_by("-number").first()
        assert attempt.outcome == AttemptOutcome.UNCERTAIN
        assert attempt.response["fence"] == {
            "since": since.isoformat(),
            "fenced_at": now.isoformat(),
            "actor": ACTOR,
        }
        assert fence.fenced_at(attempt) == now
        if name == "sending":  # the dead worker's attempt is the one made uncertain, nothing added
            assert (msg.attempts.count(), attempt.number, msg.provider_calls, msg.attempt_count) == (
                1,
                1,
                1,
                1,
            )
            assert attempt.started_at == dead_worker_started
        else:  # a new attempt stands for what the lost history may have submitted, counted as a claim
            assert (msg.attempts.count(), attempt.number, msg.provider_calls, msg.attempt_count) == (
                1,
                1,
                1,
                1,
            )
            assert attempt.started_at == since
    for pk, (status, version) in before.items():
        assert Message.objects.filter(pk=pk).values_list("status", "version").get() == (status, version)
    assert not MessageEvent.objects.filter(kind="fenced", message_id__in=before).exists()


def test_a_second_run_for_the_same_backup_fences_nothing_again(tenant):
    now = timezone.now()
    since = now - timedelta(minutes=5)
    msgs = [in_status(tenant, recipient(i), s) for i, s in enumerate([Status.SCHEDULED, Status.QUEUED])]
    first = fence.messages_fence(since=since, actor=ACTOR, now=now)
    # The same backup time written in another zone is the same fence.
    other_zone = since.astimezone(timezone.get_fixed_timezone(120))
    second = fence.messages_fence(since=other_zone, actor=ACTOR, now=now + timedelta(seconds=1))
    assert first.total == 2 and second.total == 0 and second.already_fenced == 2
    for msg in msgs:
        msg.refresh_from_db()
        assert msg.status == Status.SENDING and msg.provider_calls == 1
        assert msg.attempts.count() == 1 and msg.events.filter(kind="fenced").count() == 1


def test_a_fenced_message_already_settled_is_not_fenced_again_by_the_same_backup(adapter, sandbox, tenant):
    now = timezone.now()
    since = now - timedelta(minutes=15)
    msg = in_status(tenant, recipient(40), Status.QUEUED)
    fence.messages_fence(since=since, actor=ACTOR, now=now - timedelta(seconds=600))
    assert reconcile.message_reconcile(msg.pk) == "absent"  # back to `queued`, to be sent once
    msg.refresh_from_db()
    assert msg.status == Status.QUEUED
    again = fence.messages_fence(since=since, actor=ACTOR)
    assert again.total == 0 and again.already_fenced == 1
    msg.refresh_from_db()
    assert msg.status == Status.QUEUED and msg.events.filter(kind="fenced").count() == 1


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("yesterday", "not an ISO 8601 time"),
        ("2026-13-45T00:00:00Z", "not an ISO 8601 time"),
        ("2026-12-05T12:00:00", "no UTC offset"),
        ("2999-01-01T00:00:00Z", "in the future"),
    ],
)
def test_a_bad_backup_time_is_refused_and_nothing_is_fenced(tenant, value, words):
    msg = in_status(tenant, recipient(50), Status.QUEUED)
    with pytest.raises(fence.FenceRefused, match=words):
        fence.since_parse(value)
    with pytest.raises(CommandError, match=words):
        call_command("restore_fence", "--since", value, stdout=io.StringIO())
    msg.refresh_from_db()
    assert msg.status == Status.QUEUED and not msg.events.filter(kind="fenced").exists()


def test_the_command_fences_and_prints_its_counts(tenant):
    msg = in_status(tenant, recipient(60), Status.QUEUED)
    later = in_status(tenant, recipient(61), Status.SCHEDULED, due_in=3600)
    since = (timezone.now() - timedelta(minutes=1)).isoformat()
    out = io.StringIO()
    call_command("restore_fence", "--since", since, "--actor", "alice", stdout=out)
    text = out.getvalue()
    assert "fenced 1 (scheduled 0, queued 1, sending 0)" in text, text
    assert (
        "already fenced 0" in text
        and "scheduled and left alone (due later, or waiting for a person) 1" in text
    )
    msg.refresh_from_db()
    later.refresh_from_db()
    assert msg.status == Status.SENDING and msg.events.get(kind="fenced").actor == "operator:alice"
    assert later.status == Status.SCHEDULED
    out = io.StringIO()
    call_command("restore_fence", "--since", since, "--actor", "alice", stdout=out)
    assert "fenced 0 " in out.getvalue() and "already fenced 1" in out.getvalue()


def test_a_fenced_message_the_provider_holds_is_recorded_under_its_sid_and_never_sent_again(
    adapter, sandbox, tenant
):
    to = recipient(70)
    msg = in_status(tenant, to, Status.QUEUED)
    since = timezone.now() - timedelta(seconds=1)
    # The lost history sent it after the backup point.
    sid = sandbox.client().messages.create(to=to, from_=tenant.default_from, body=msg.body).sid
    fence.messages_fence(since=since, actor=ACTOR)
    assert reconcile.message_reconcile(msg.pk) == "found"
    msg.refresh_from_db()
    assert msg.status in (Status.SENT, Status.DELIVERED) and msg.provider_message_id == sid
    assert sending.send_batch([msg.pk]).claimed == 0
    assert len(sandbox.list_messages(to=to)) == 1
    assert msg.attempts.get().outcome == AttemptOutcome.RECONCILED_FOUND


def test_a_fenced_message_is_proven_absent_only_past_the_bound_counted_from_the_fence(
    adapter, sandbox, tenant, settings
):
    settings.RECONCILE_LIST_LAG_SECONDS = 30
    to = recipient(71)
    msg = in_status(tenant, to, Status.SCHEDULED, due_in=-600)
    # A backup long before: counted from the attempt's start (the backup time) the bound has passed, but
    # the old gateway may have submitted until just before the fence.
    since = timezone.now() - timedelta(seconds=300)
    fence.messages_fence(since=since, actor=ACTOR)
    assert reconcile.message_reconcile(msg.pk) == "absent_once"
    msg.refresh_from_db()
    assert msg.status == Status.SENDING
    attempt = msg.attempts.get()
    aged = (timezone.now() - timedelta(seconds=past_absence_bound(settings))).isoformat()
    Attempt.objects.filter(pk=attempt.pk).update(
        response={"fence": {**attempt.response["fence"], "fenced_at": aged}}
    )
    assert reconcile.message_reconcile(msg.pk) == "absent"
    entry = msg.events.get(kind="reconciled_absent").details
    assert entry["rule"] == "restore_fence" and "restored from a backup" in entry["why"]
    msg.refresh_from_db()
    assert msg.status == Status.QUEUED
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.SENT and len(sandbox.list_messages(to=to)) == 1


def test_a_fenced_message_found_twice_at_the_provider_is_ambiguous_and_never_resent(adapter, sandbox, tenant):
    to = recipient(72)
    msg = in_status(tenant, to, Status.SENDING)
    since = timezone.now() - timedelta(seconds=1)
    for _ in range(2):
        sandbox.client().messages.create(to=to, from_=tenant.default_from, body=msg.body)
    fence.messages_fence(since=since, actor=ACTOR)
    assert reconcile.message_reconcile(msg.pk) == "ambiguous"
    msg.refresh_from_db()
    assert msg.status == Status.SENT and msg.reason_code == "reconciled_ambiguous"
    assert sending.send_batch([msg.pk]).claimed == 0
    assert len(sandbox.list_messages(to=to)) == 2
