from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling import transitions
from scheduling.models import Message, MessageEvent, Status
from tests.factories import message


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
