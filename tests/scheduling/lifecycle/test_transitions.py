from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.lifecycle import transitions
from scheduling.lifecycle.reasons import ReasonCode
from scheduling.models import Message, MessageEvent, Status
from tests.factories import message

# SQLite half too: the transitions' SQL has a SQLite form (RETURNING, no row locks).
pytestmark = pytest.mark.sqlite


@pytest.fixture
def tenant(tenant_and_key):
    return tenant_and_key[0]


def events(msg):
    return list(
        MessageEvent.objects.filter(message=msg)
        .order_by("id")
        .values_list("kind", "from_status", "to_status")
    )


@pytest.mark.django_db
def test_transition_wins_once_and_writes_one_event(tenant):
    msg = message(tenant)
    first = transitions.transition(
        msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.CANCELLED, kind="cancelled", actor="t"
    )
    second = transitions.transition(
        msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued"
    )
    assert first.won and first.status == Status.CANCELLED and first.version == 2
    assert not second.won and second.status == Status.CANCELLED
    msg.refresh_from_db()
    assert msg.status == Status.CANCELLED and msg.version == 2
    assert events(msg) == [("created", "scheduled", "scheduled"), ("cancelled", "scheduled", "cancelled")]


@pytest.mark.django_db
def test_stale_version_loses(tenant):
    msg = message(tenant)
    assert transitions.transition(
        msg.pk,
        from_statuses=[Status.SCHEDULED],
        to_status=Status.SCHEDULED,
        kind="edited",
        expected_version=1,
    ).won
    stale = transitions.transition(
        msg.pk,
        from_statuses=[Status.SCHEDULED],
        to_status=Status.CANCELLED,
        kind="cancelled",
        expected_version=1,
    )
    assert not stale.won and stale.status == Status.SCHEDULED and stale.version == 2


@pytest.mark.django_db
def test_disallowed_transition_raises(tenant):
    msg = message(tenant)
    with pytest.raises(transitions.TransitionNotAllowed):
        transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.SENT, kind="sent")
    with pytest.raises(transitions.TransitionNotAllowed):
        transitions.transition(msg.pk, from_statuses=[Status.DELIVERED], to_status=Status.SENT, kind="sent")


@pytest.mark.django_db
def test_unknown_column_is_refused(tenant):
    msg = message(tenant)
    with pytest.raises(ValueError, match="not settable"):
        transitions.transition(
            msg.pk,
            from_statuses=[Status.SCHEDULED],
            to_status=Status.SCHEDULED,
            kind="edited",
            set_fields={"tenant_id": 99},
        )


@pytest.mark.django_db
def test_transition_many_moves_only_rows_in_the_source_status(tenant):
    a, b, c = message(tenant), message(tenant), message(tenant)
    transitions.transition(
        b.pk, from_statuses=[Status.SCHEDULED], to_status=Status.CANCELLED, kind="cancelled"
    )
    rows = transitions.transition_many(
        [a.pk, b.pk, c.pk],
        from_status=Status.SCHEDULED,
        to_status=Status.QUEUED,
        kind="queued",
        returning=("id", "version", "to"),
    )
    assert sorted(r["id"] for r in rows) == [a.pk, c.pk]
    assert all(r["version"] == 2 and r["to"] == a.to for r in rows)
    assert Message.objects.get(pk=b.pk).status == Status.CANCELLED
    assert MessageEvent.objects.filter(kind="queued").count() == 2


@pytest.mark.django_db
def test_transition_versioned_sets_per_row_values_and_checks_version(tenant):
    a, b = message(tenant, status=Status.SENDING), message(tenant, status=Status.SENDING)
    moved = transitions.transition_versioned(
        [
            (a.pk, 1, {"provider_message_id": "SMa", "provider_status": "queued"}),
            (b.pk, 7, {"provider_message_id": "SMb", "provider_status": "queued"}),
        ],
        from_status=Status.SENDING,
        to_status=Status.SENT,
        kind="sent",
        per_row_columns=("provider_message_id", "provider_status"),
        set_fields={"sent_at": timezone.now()},
    )
    assert moved == [a.pk]
    a.refresh_from_db()
    b.refresh_from_db()
    assert (a.status, a.provider_message_id, a.version) == (Status.SENT, "SMa", 2)
    assert (b.status, b.provider_message_id) == (Status.SENDING, None)


@pytest.mark.django_db
def test_transition_versioned_per_row_datetimes(tenant):
    a = message(tenant, status=Status.SENDING)
    at = timezone.now() + timedelta(seconds=42)
    moved = transitions.transition_versioned(
        [(a.pk, 1, {"run_after": at, "error_code": "", "status_reason": "transient"})],
        from_status=Status.SENDING,
        to_status=Status.QUEUED,
        kind="retry_scheduled",
        per_row_columns=("run_after", "error_code", "status_reason"),
    )
    assert moved == [a.pk]
    a.refresh_from_db()
    assert a.status == Status.QUEUED and abs((a.run_after - at).total_seconds()) < 0.001


@pytest.mark.django_db
def test_claim_respects_limit_order_and_condition(tenant):
    late = message(tenant, due_in=-5)
    early = message(tenant, due_in=-10)
    future = message(tenant, due_in=3600)
    now = timezone.now()
    rows = transitions.claim(
        from_status=Status.SCHEDULED,
        to_status=Status.QUEUED,
        kind="queued",
        where_sql='"run_after" <= %s',
        where_params=[now],
        order_by='"run_after"',
        limit=1,
    )
    assert [r["id"] for r in rows] == [early.pk]
    rows = transitions.claim(
        from_status=Status.SCHEDULED,
        to_status=Status.QUEUED,
        kind="queued",
        where_sql='"run_after" <= %s',
        where_params=[now],
        order_by='"run_after"',
        limit=10,
    )
    assert [r["id"] for r in rows] == [late.pk]
    assert Message.objects.get(pk=future.pk).status == Status.SCHEDULED


@pytest.mark.django_db
def test_each_edge_stamps_its_own_time(tenant):
    now = timezone.now() - timedelta(seconds=30)  # not the wall clock: the move's own time
    cancelled, queued, sending = message(tenant), message(tenant), message(tenant, status=Status.QUEUED)
    transitions.transition(
        cancelled.pk, from_statuses=[Status.SCHEDULED], to_status=Status.CANCELLED, kind="cancelled", now=now
    )
    transitions.transition_many(
        [queued.pk], from_status=Status.SCHEDULED, to_status=Status.QUEUED, kind="q", now=now
    )
    transitions.transition_many(
        [sending.pk], from_status=Status.QUEUED, to_status=Status.SENDING, kind="attempt_started", now=now
    )
    later = now + timedelta(seconds=5)
    transitions.transition_versioned(
        [(sending.pk, 2, {})], from_status=Status.SENDING, to_status=Status.SENT, kind="sent", now=later
    )
    stamps = ("queued_at", "sending_at", "sent_at", "cancelled_at", "failed_at", "expired_at")
    got = {m.pk: m for m in Message.objects.filter(pk__in=[cancelled.pk, queued.pk, sending.pk])}
    assert {s: getattr(got[cancelled.pk], s) for s in stamps} == {s: None for s in stamps} | {
        "cancelled_at": now
    }
    assert {s: getattr(got[queued.pk], s) for s in stamps} == {s: None for s in stamps} | {"queued_at": now}
    assert {s: getattr(got[sending.pk], s) for s in stamps} == {s: None for s in stamps} | {
        "sending_at": now,
        "sent_at": later,
    }


@pytest.mark.django_db
def test_claim_stamps_and_a_same_status_move_stamps_nothing(tenant):
    msg = message(tenant, due_in=-10, validity=5)
    now = timezone.now()
    transitions.transition(
        msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.SCHEDULED, kind="edited"
    )
    rows = transitions.claim(
        from_status=Status.SCHEDULED,
        to_status=Status.EXPIRED,
        kind="expired",
        where_sql='"expires_at" <= %s',
        where_params=[now],
        order_by='"id"',
        limit=1,
        now=now,
    )
    assert [r["id"] for r in rows] == [msg.pk]
    msg.refresh_from_db()
    assert (msg.status, msg.expired_at, msg.queued_at, msg.cancelled_at) == (Status.EXPIRED, now, None, None)


@pytest.mark.django_db
def test_a_callers_own_time_for_the_stamp_wins(tenant):
    """A receipt or a provider lookup knows when the message really was sent or delivered."""
    a, b = message(tenant, status=Status.SENDING), message(tenant, status=Status.SENDING)
    now = timezone.now()
    found = now - timedelta(minutes=3)
    transitions.transition(
        a.pk,
        from_statuses=[Status.SENDING],
        to_status=Status.SENT,
        kind="reconciled_found",
        set_fields={"sent_at": found},
        now=now,
    )
    transitions.transition_versioned(
        [(b.pk, 1, {"delivered_at": found})],
        from_status=Status.SENDING,
        to_status=Status.DELIVERED,
        kind="delivered",
        per_row_columns=("delivered_at",),
        now=now,
    )
    assert Message.objects.get(pk=a.pk).sent_at == found
    assert Message.objects.get(pk=b.pk).delivered_at == found
    assert transitions.stamp_column(Status.SENDING, Status.UNDELIVERED) == "failed_at"
    assert transitions.stamp_column(Status.QUEUED, Status.QUEUED) is None


@pytest.mark.django_db
def test_a_replay_is_no_longer_failed(tenant):
    msg = message(tenant, status=Status.SENDING)
    failed_at = timezone.now() - timedelta(minutes=1)
    transitions.transition(
        msg.pk, from_statuses=[Status.SENDING], to_status=Status.FAILED, kind="failed", now=failed_at
    )
    assert Message.objects.get(pk=msg.pk).failed_at == failed_at
    transitions.transition(msg.pk, from_statuses=[Status.FAILED], to_status=Status.QUEUED, kind="replayed")
    msg.refresh_from_db()
    assert (msg.status, msg.failed_at, msg.queued_at) == (Status.QUEUED, None, None)


@pytest.mark.django_db
def test_reason_codes_come_from_the_one_list(tenant):
    a, b = message(tenant), message(tenant)
    with pytest.raises(ValueError, match="not a ReasonCode"):
        transitions.transition(
            a.pk,
            from_statuses=[Status.SCHEDULED],
            to_status=Status.CANCELLED,
            kind="cancelled",
            set_fields={"reason_code": "cancelled_by_requets"},
        )
    with pytest.raises(ValueError, match="not a ReasonCode"):
        transitions.transition_versioned(
            [(a.pk, 1, {"reason_code": "paced"}), (b.pk, 1, {"reason_code": "pacing"})],
            from_status=Status.SCHEDULED,
            to_status=Status.SCHEDULED,
            kind="paced",
            per_row_columns=("reason_code",),
        )
    assert Message.objects.filter(pk__in=[a.pk, b.pk], status=Status.SCHEDULED, version=1).count() == 2
    moved = transitions.transition(
        a.pk,
        from_statuses=[Status.SCHEDULED],
        to_status=Status.CANCELLED,
        kind="cancelled",
        set_fields={"reason_code": ReasonCode.CANCELLED_BY_REQUEST},
    )
    assert moved.won and Message.objects.get(pk=a.pk).reason_code == "cancelled_by_request"
