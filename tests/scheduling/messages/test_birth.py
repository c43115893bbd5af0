"""One birth function for one message or many (scheduling.messages.birth): the same insert rules and the same
quota booking, the API's message refused over the quota, a batch booked past it."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from scheduling.limits.models import QuotaWindow
from scheduling.messages.birth import messages_birth
from scheduling.models import Message, MessageEvent, Status, new_public_id
from smsgw.domain_errors import QuotaExceeded
from tests.factories import recipient, tenant_with_key

pytestmark = pytest.mark.django_db


def _one(tenant, i: int, **fields) -> Message:
    due = timezone.now()
    return Message(
        tenant=tenant,
        to=recipient(i),
        body="hello",
        encoding="GSM-7",
        segments=1,
        from_number=tenant.default_from,
        due_at=due,
        expires_at=due + timedelta(hours=1),
        run_after=due,
        status=Status.SCHEDULED,
        **fields,
    )


def _row(tenant, i: int) -> tuple[dict, dict]:
    due = timezone.now()
    values = {
        "public_id": new_public_id(),
        "tenant_id": tenant.pk,
        "to": recipient(i),
        "body": "hello",
        "encoding": "GSM-7",
        "segments": 1,
        "from_number": tenant.default_from,
        "priority": "bulk",
        "due_at": due,
        "expires_at": due + timedelta(hours=1),
        "run_after": due,
        "status": Status.SCHEDULED,
        "version": 1,
        "created_at": due,
        "updated_at": due,
    }
    return values, {"source": "test"}


def _birth(tenant, rows, **kwargs):
    with transaction.atomic():
        return messages_birth(rows, actor="t", now=timezone.now(), tenants={tenant.pk: tenant}, **kwargs)


def _booked(tenant) -> int:
    return sum(QuotaWindow.objects.filter(tenant_id=tenant.pk).values_list("booked", flat=True))


def test_one_message_goes_in_with_its_created_event_and_its_booking():
    tenant, _ = tenant_with_key(daily_message_quota=5)
    message = _one(tenant, 1)

    births = _birth(tenant, [(message, {"why": "api"})], refuse_over_quota=True)

    assert births.ids == [message.pk] and births.existing == 0
    event = MessageEvent.objects.get(message_id=message.pk)
    assert (event.kind, event.actor, event.details) == ("created", "t", {"why": "api"})
    assert _booked(tenant) == 1


def test_a_message_whose_key_is_there_already_is_reported_existing_and_books_nothing():
    tenant, _ = tenant_with_key(daily_message_quota=5)
    _birth(tenant, [(_one(tenant, 1, idempotency_key="k1"), {})], refuse_over_quota=True)

    again = _one(tenant, 2, idempotency_key="k1")
    births = _birth(tenant, [(again, {})], refuse_over_quota=True)

    assert (births.ids, births.existing, again.pk) == ([], 1, None)
    assert Message.objects.filter(tenant=tenant).count() == 1
    assert _booked(tenant) == 1


def test_the_api_message_is_refused_over_the_quota_and_a_batch_is_booked_past_it():
    tenant, _ = tenant_with_key(daily_message_quota=1)
    _birth(tenant, [(_one(tenant, 1), {})], refuse_over_quota=True)

    with pytest.raises(QuotaExceeded) as refused:
        _birth(tenant, [(_one(tenant, 2), {})], refuse_over_quota=True)
    assert refused.value.extra["quota"] == "daily_message_quota"
    assert (Message.objects.filter(tenant=tenant).count(), _booked(tenant)) == (1, 1)  # rolled back

    births = _birth(tenant, [_row(tenant, 3), _row(tenant, 4)])  # a schedule's or campaign's rows
    assert len(births.ids) == 2
    assert (Message.objects.filter(tenant=tenant).count(), _booked(tenant)) == (3, 3)


def test_the_pending_quota_refuses_the_api_message_before_anything_is_stored():
    tenant, _ = tenant_with_key(max_pending_scheduled=1)
    _birth(tenant, [(_one(tenant, 1), {})], refuse_over_quota=True)

    with pytest.raises(QuotaExceeded) as refused:
        _birth(tenant, [(_one(tenant, 2), {})], refuse_over_quota=True)

    assert (refused.value.extra["quota"], refused.value.extra["used"]) == ("max_pending_scheduled", 1)
    assert Message.objects.filter(tenant=tenant).count() == 1
