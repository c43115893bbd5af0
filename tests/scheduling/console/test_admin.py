"""The message console: read-only pages that show what an operator needs (masked recipient, zones
labelled, a grouped detail page with the timeline), search in any number format, and the cancel /
reschedule / replay actions that go through the API's services, in bulk, behind a confirmation page,
with the operator on every timeline entry."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from scheduling.lifecycle import transitions
from scheduling.models import Message, MessageEvent, Status
from tests.factories import message, recipient, tenant_with_key

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/scheduling/message/"


@pytest.fixture
def ops(db):
    user = User.objects.create_superuser("ops", "ops@example.com", "pw-for-tests-only")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme", default_timezone="America/New_York")[0]


def _set_status(msg: Message, status: str) -> None:
    # Test set-up only: a row at the status a scenario needs, through the one writer.
    Message.objects.filter(pk=msg.pk).update(status=status, run_after=None)


def _action(client: Client, action: str, ids, **extra):
    data = {"action": action, "_selected_action": [str(i) for i in ids], **extra}
    return client.post(CHANGELIST, data, follow="confirm" in extra)


def test_list_masks_recipient_previews_body_and_labels_zones(ops, tenant):
    msg = message(tenant, to="+14155550123", body="Your code is 123456, valid for ten minutes. Do not share.")
    page = ops.get(CHANGELIST).content.decode()
    assert msg.public_id in page
    assert "+1415*****23" in page and "+14155550123" not in page
    assert "Your code is 123456, valid for ten minu…" in page and "Do not share" not in page
    local = msg.due_at.astimezone(timezone.get_fixed_timezone(0))
    assert f"{local:%H:%M:%S} UTC" in page  # seconds, zone named
    assert "(America/New_York)" in page  # the tenant's local time beside it


@pytest.mark.parametrize(
    "typed", ["+1 (415) 555-0123", "(415) 555-0123", "415.555.0123", "001 415 555 0123", "14155550123"]
)
def test_search_finds_a_number_written_in_any_common_format(ops, tenant, typed):
    wanted = message(tenant, to="+14155550123")
    other = message(tenant, to="+14155550199")
    page = ops.get(CHANGELIST, {"q": typed}).content.decode()
    assert wanted.public_id in page
    assert other.public_id not in page


def test_search_by_public_id_and_provider_sid(ops, tenant):
    a, b = message(tenant), message(tenant)
    Message.objects.filter(pk=b.pk).update(provider_message_id="SM" + "a" * 32)
    assert a.public_id in ops.get(CHANGELIST, {"q": a.public_id}).content.decode()
    page = ops.get(CHANGELIST, {"q": "SM" + "a" * 32}).content.decode()
    assert b.public_id in page and a.public_id not in page


def test_due_date_range_filter(ops, tenant):
    soon = message(tenant, due_in=60)
    later = message(tenant, due_in=10 * 86400)
    day = (timezone.now() + timedelta(days=10)).date().isoformat()
    page = ops.get(CHANGELIST, {"due_at__date__gte": day, "due_at__date__lte": day}).content.decode()
    assert later.public_id in page and soon.public_id not in page
    # The sidebar offers the range as two date inputs, keeping the chosen values.
    assert f'type="date" name="due_at__date__gte" value="{day}"' in page
    assert 'type="date" name="created_at__date__lte"' in page
    assert ops.get(CHANGELIST, {"due_at__date__gte": "yesterday"}).status_code == 302  # ?e=1, not a 500


def test_reason_filter_finds_the_ambiguous_messages_an_operator_must_check(ops, tenant):
    ambiguous = message(tenant, status=Status.SENT)
    Message.objects.filter(pk=ambiguous.pk).update(reason_code="reconciled_ambiguous")
    other = message(tenant, status=Status.SENT)
    page = ops.get(CHANGELIST, {"reason_code": "reconciled_ambiguous"}).content.decode()
    assert ambiguous.public_id in page and other.public_id not in page
    assert "reason_code=reconciled_ambiguous" in ops.get(CHANGELIST).content.decode()


def test_detail_page_is_grouped_read_only_with_the_timeline(ops, tenant):
    msg = message(tenant)
    page = ops.get(f"{CHANGELIST}{msg.pk}/change/").content.decode()
    for heading in ("Request", "Status", "Timing", "Provider", "Recurrence"):
        assert f'class="fieldset-heading">{heading}</h2>' in page
    assert 'id="events-heading"' in page and "Timeline" in page and "<p>created</p>" in page
    assert 'name="_save"' not in page and "<textarea" not in page  # nothing to edit


def test_detail_page_shows_the_attempts_before_the_timeline(ops, tenant):
    # delivery's admin adds the attempts to scheduling's message page (scheduling imports no delivery).
    from delivery.models import Attempt

    msg = message(tenant)
    Attempt.objects.create(
        message=msg,
        number=1,
        provider="twilio",
        idempotency_token="tok-1",
        started_at=timezone.now(),
        outcome="accepted",
        http_status=201,
        provider_message_id="SM" + "a" * 32,
    )
    page = ops.get(f"{CHANGELIST}{msg.pk}/change/").content.decode()
    assert 'id="attempts-heading"' in page and "SM" + "a" * 32 in page
    assert page.index('id="attempts-heading"') < page.index('id="events-heading"')


def test_no_add_no_delete_for_messages_and_their_history(ops, tenant):
    msg = message(tenant)
    assert ops.get(f"{CHANGELIST}add/").status_code == 403
    assert ops.get(f"{CHANGELIST}{msg.pk}/delete/").status_code == 403
    assert "delete_selected" not in ops.get(CHANGELIST).content.decode()
    response = _action(ops, "delete_selected", [msg.pk], post="yes")
    assert Message.objects.filter(pk=msg.pk).exists()
    assert response.status_code in (200, 302)


def test_cancel_one_writes_the_operator_to_the_timeline(ops, tenant):
    msg = message(tenant, due_in=3600)
    confirm = _action(ops, "cancel_messages", [msg.pk]).content.decode()
    assert "1 selected" in confirm and 'id="will-change">1<' in confirm
    assert Message.objects.get(pk=msg.pk).status == Status.SCHEDULED  # nothing before "confirm"
    done = _action(ops, "cancel_messages", [msg.pk], confirm="yes").content.decode()
    assert "Cancelled 1." in done
    msg.refresh_from_db()
    assert msg.status == Status.CANCELLED
    event = MessageEvent.objects.filter(message=msg, kind="cancelled").get()
    assert event.actor == "admin:ops"
    assert LogEntry.objects.filter(object_id=str(msg.pk)).exists()


def test_bulk_cancel_of_a_mix_reports_each_kind_and_leaves_the_rest(ops, tenant):
    scheduled = [message(tenant, due_in=3600, to=recipient(i)) for i in range(4)]
    queued = message(tenant, to=recipient(10))
    _set_status(queued, Status.QUEUED)
    sending = [message(tenant, to=recipient(20 + i)) for i in range(2)]
    for m in sending:
        _set_status(m, Status.SENDING)
    delivered = message(tenant, to=recipient(30))
    _set_status(delivered, Status.DELIVERED)
    already = message(tenant, to=recipient(40))
    _set_status(already, Status.CANCELLED)
    everyone = [*scheduled, queued, *sending, delivered, already]
    ids = [m.pk for m in everyone]

    confirm = _action(ops, "cancel_messages", ids).content.decode()
    assert "9 selected" in confirm and 'id="will-change">5<' in confirm
    assert "2 sending" in confirm and "1 delivered" in confirm and "1 cancelled" in confirm

    done = _action(ops, "cancel_messages", ids, confirm="yes").content.decode()
    assert "Cancelled 5; 1 was already cancelled; 2 were already sending; 1 was already delivered." in done
    final = dict(Message.objects.filter(pk__in=ids).values_list("pk", "status"))
    for m in [*scheduled, queued]:
        assert final[m.pk] == Status.CANCELLED
    for m in sending:
        assert final[m.pk] == Status.SENDING
    assert final[delivered.pk] == Status.DELIVERED
    assert final[already.pk] == Status.CANCELLED
    assert MessageEvent.objects.filter(message_id__in=ids, kind="cancelled", actor="admin:ops").count() == 5


def test_bulk_cancel_counts_a_message_that_moved_after_the_confirmation(ops, tenant):
    racing = message(tenant, due_in=3600)
    calm = message(tenant, due_in=3600, to=recipient(1))
    _action(ops, "cancel_messages", [racing.pk, calm.pk])  # the page says 2 will change
    transitions.transition(
        racing.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="released"
    )
    transitions.transition(racing.pk, from_statuses=[Status.QUEUED], to_status=Status.SENDING, kind="claimed")
    done = _action(ops, "cancel_messages", [racing.pk, calm.pk], confirm="yes").content.decode()
    assert "Cancelled 1; 1 was already sending." in done
    assert Message.objects.get(pk=racing.pk).status == Status.SENDING
    assert Message.objects.get(pk=calm.pk).status == Status.CANCELLED


def test_reschedule_to_a_local_time_in_a_named_zone(ops, tenant):
    msg = message(tenant, due_in=3600)
    day = (timezone.now() + timedelta(days=3)).date()
    form = _action(ops, "reschedule_messages", [msg.pk]).content.decode()
    assert 'name="local_time"' in form and "America/New_York" in form
    done = _action(
        ops,
        "reschedule_messages",
        [msg.pk],
        confirm="yes",
        local_time=f"{day}T09:30",
        timezone="Europe/Paris",
    ).content.decode()
    assert "Rescheduled 1." in done
    msg.refresh_from_db()
    assert msg.status == Status.SCHEDULED
    paris = msg.due_at.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Paris"))
    assert (paris.date(), paris.hour, paris.minute) == (day, 9, 30)
    assert msg.requested_timezone == "Europe/Paris"
    event = MessageEvent.objects.get(message=msg, kind="rescheduled")
    assert event.actor == "admin:ops" and event.details["timezone"] == "Europe/Paris"


def test_reschedule_refuses_what_the_api_refuses(ops, tenant):
    msg = message(tenant, due_in=3600)
    before = msg.due_at
    past = (timezone.now() - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    done = _action(
        ops, "reschedule_messages", [msg.pk], confirm="yes", local_time=past, timezone="UTC"
    ).content.decode()
    assert "Rescheduled 0; 1 refused: send_at:" in done
    msg.refresh_from_db()
    assert msg.due_at == before


def test_replay_from_dead_letter_gives_a_new_attempt_budget(ops, tenant):
    dead = message(tenant, validity=60)
    Message.objects.filter(pk=dead.pk).update(
        status=Status.FAILED,
        run_after=None,
        attempt_count=5,
        failed_at=timezone.now(),
        status_reason="retries exhausted",
        expires_at=timezone.now() - timedelta(minutes=1),
    )
    alive = message(tenant, to=recipient(2), due_in=3600)
    done = _action(ops, "replay_messages", [dead.pk, alive.pk], confirm="yes").content.decode()
    assert "Replayed 1; 1 was scheduled." in done
    dead.refresh_from_db()
    assert dead.status == Status.QUEUED
    assert dead.attempt_count == 0 and dead.failed_at is None and dead.published_at is None
    assert dead.run_after <= timezone.now() and dead.expires_at > timezone.now()
    event = MessageEvent.objects.get(message=dead, kind="replayed")
    assert (event.from_status, event.to_status, event.actor) == (Status.FAILED, Status.QUEUED, "admin:ops")
    assert event.details["previous_reason"] == "retries exhausted"
    assert Message.objects.get(pk=alive.pk).status == Status.SCHEDULED


def test_posting_the_change_form_writes_nothing_over_a_concurrent_transition(ops, tenant):
    msg = message(tenant, due_in=3600)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="released")
    response = ops.post(f"{CHANGELIST}{msg.pk}/change/", {"_save": "Save"})
    assert response.status_code == 405
    msg.refresh_from_db()
    assert msg.status == Status.QUEUED and msg.version == 2


def test_the_message_page_offers_the_actions_its_status_allows(ops, tenant):
    scheduled = message(tenant, due_in=3600)
    page = ops.get(f"{CHANGELIST}{scheduled.pk}/change/").content.decode()
    assert 'id="action-cancel_messages"' in page and 'id="action-reschedule_messages"' in page
    assert 'id="action-replay_messages"' not in page
    failed = message(tenant, to=recipient(3))
    Message.objects.filter(pk=failed.pk).update(status=Status.FAILED, run_after=None)
    page = ops.get(f"{CHANGELIST}{failed.pk}/change/").content.decode()
    assert 'id="action-replay_messages"' in page and 'id="action-cancel_messages"' not in page
    # The button posts the list's action for this one message: the confirmation page answers.
    confirm = _action(ops, "replay_messages", [failed.pk]).content.decode()
    assert 'id="will-change">1<' in confirm


def test_schedule_actions_pause_resume_cancel_through_the_schedule_service(ops, tenant):
    from scheduling.models import Schedule, ScheduleStatus
    from scheduling.schedules import service as schedules

    created = schedules.schedule_create(
        tenant=tenant,
        actor="test",
        data={"to": "+14155550123", "body": "weekly", "rrule": "FREQ=WEEKLY", "start": "2030-01-07T09:00:00"},
    )
    schedule = created.schedule
    url = "/admin/scheduling/schedule/"
    done = ops.post(url, {"action": "pause_schedules", "_selected_action": [schedule.pk]}, follow=True)
    assert "Paused 1 schedules." in done.content.decode()
    assert Schedule.objects.get(pk=schedule.pk).status == ScheduleStatus.PAUSED
    ops.post(url, {"action": "resume_schedules", "_selected_action": [schedule.pk]})
    assert Schedule.objects.get(pk=schedule.pk).status == ScheduleStatus.ACTIVE
    ops.post(url, {"action": "cancel_schedules", "_selected_action": [schedule.pk]})
    schedule.refresh_from_db()
    assert schedule.status == ScheduleStatus.CANCELLED
    actors = set(schedule.versions.values_list("actor", flat=True))
    assert "admin:ops" in actors


def test_replay_refuses_a_message_that_failed_on_the_tenants_daily_quota(ops, tenant):
    over = message(tenant)
    Message.objects.filter(pk=over.pk).update(
        status=Status.FAILED, run_after=None, reason_code="quota_exceeded"
    )
    done = _action(ops, "replay_messages", [over.pk], confirm="yes").content.decode()
    assert "Replayed 0; 1 refused: It failed on the tenant&#x27;s daily quota" in done
    assert Message.objects.get(pk=over.pk).status == Status.FAILED
    assert not MessageEvent.objects.filter(message=over, kind="replayed").exists()
