"""The velocity guard (docs/guards.md): over a tenant's limit of messages to one destination prefix, or to
numbers it never sent to, further sends are held for review at the release step (status stays
`scheduled`, reason held_for_review, one timeline entry), never submitted until an operator releases
them in the admin (audited), or cancelled there. Real database, the release step and the in-process send
worker against the real sandbox."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from delivery.guards import velocity
from delivery.models import KnownNumber, ReviewHold, VelocityCounter
from delivery.sending import worker as sending
from scheduling.dispatch import release
from scheduling.models import Message, Status
from smsgw.console.roles import roles_sync
from tests.factories import message, recipient, tenant_with_key

pytestmark = pytest.mark.django_db
PREFIX = recipient(0).removeprefix("+")[:7]  # "1415200": every recipient(i) below 1000 shares it


@pytest.fixture
def tenant(db):
    t, key = tenant_with_key("acme")
    t.velocity_prefix_max = 3
    t.save(update_fields=["velocity_prefix_max"])
    return t, key


@pytest.fixture
def api(tenant):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {tenant[1]}")
    return client


def operator_client(role: str = "operator") -> Client:
    roles_sync(apps)
    user = User.objects.create_user(role, f"{role}@example.com", "pw-for-tests-only-1", is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    client = Client()
    client.force_login(user)
    return client


def release_and_send() -> list[int]:
    """One release pass, then the send worker for what it queued (the broker is not involved here)."""
    release.due_release(limit=100)
    ids = list(Message.objects.filter(status=Status.QUEUED).values_list("pk", flat=True))
    if ids:
        sending.send_batch(ids)
    return ids


def states(msgs) -> list[tuple[str, str]]:
    return [tuple(Message.objects.filter(pk=m.pk).values_list("status", "reason_code").get()) for m in msgs]


def admin_action(client: Client, action: str, hold: ReviewHold):
    return client.post(
        "/admin/delivery/reviewhold/", {"action": action, "_selected_action": [hold.pk]}, follow=False
    )


def test_a_held_prefix_is_released_by_an_operator_in_the_admin_and_then_sent(adapter, sandbox, tenant, api):
    t, _ = tenant
    msgs = [message(t, to=recipient(i)) for i in range(5)]
    release_and_send()
    assert states(msgs) == [(Status.SENT, "")] * 3 + [(Status.SCHEDULED, "held_for_review")] * 2
    held = msgs[3:]
    for m in held:
        m.refresh_from_db()
        assert f"+{PREFIX}" in m.status_reason and "more than 3 messages" in m.status_reason
        assert m.events.filter(kind="held_for_review").count() == 1
        shown = api.get(f"/v1/messages/{m.public_id}").json()
        assert (shown["status"], shown["reason_code"], shown["expected_send_at"]) == (
            "scheduled",
            "held_for_review",
            None,
        )
    listed = api.get("/v1/messages?reason_code=held_for_review").json()["results"]
    assert sorted(r["id"] for r in listed) == sorted(m.public_id for m in held)
    hold = ReviewHold.objects.get()
    assert (hold.tenant_id, hold.rule, hold.prefix, hold.held_count, hold.state) == (
        t.pk,
        "prefix",
        PREFIX,
        2,
        "open",
    )
    assert sandbox.stats()["submissions"] == 3

    # Held messages are never submitted while the hold is open: due again, they wait on (no new entry).
    Message.objects.filter(pk__in=[m.pk for m in held]).update(run_after=timezone.now())
    assert release_and_send() == []
    assert all(m.events.filter(kind="held_for_review").count() == 1 for m in held)

    viewer = operator_client("viewer")
    admin_action(viewer, "release", hold)
    assert ReviewHold.objects.get().state == "open"  # a viewer acts on nothing

    client = operator_client("operator")
    page = client.get("/admin/delivery/reviewhold/").content.decode()
    assert f"+{PREFIX}…" in page and recipient(3) not in page
    resp = admin_action(client, "release", hold)
    assert resp.status_code == 302, resp.content
    hold.refresh_from_db()
    assert (hold.state, hold.closed_by, hold.closed_count) == ("released", "admin:operator", 2)
    assert LogEntry.objects.filter(object_id=str(hold.pk), change_message__contains="released").exists()
    for m in held:
        assert m.events.get(kind="review_released").actor == "admin:operator"

    later = message(t, to=recipient(5))  # the same prefix, the same window: not held again
    release_and_send()
    assert states([*msgs, later]) == [(Status.SENT, "")] * 6
    assert sandbox.stats()["submissions"] == 6
    assert ReviewHold.objects.count() == 1


def test_an_operator_cancels_a_hold_and_its_messages_end_cancelled(adapter, sandbox, tenant, api):
    t, _ = tenant
    msgs = [message(t, to=recipient(10 + i)) for i in range(6)]
    release_and_send()
    held = msgs[3:]
    # The tenant may still cancel a held message itself, like any scheduled one.
    assert api.post(f"/v1/messages/{held[0].public_id}/cancel").status_code == 200
    hold = ReviewHold.objects.get()
    resp = admin_action(operator_client(), "cancel", hold)
    assert resp.status_code == 302
    hold.refresh_from_db()
    assert (hold.state, hold.closed_count, hold.held_count) == ("cancelled", 2, 3)
    # A tenant's cancel says why the message ended, not the reason it waited for.
    assert (
        states(msgs)
        == [(Status.SENT, "")] * 3
        + [(Status.CANCELLED, "cancelled_by_request")]
        + [(Status.CANCELLED, "review_cancelled")] * 2
    )
    release_and_send()
    assert sandbox.stats()["submissions"] == 3
    assert LogEntry.objects.filter(object_id=str(hold.pk), change_message__contains="cancelled").exists()


def test_messages_to_new_numbers_over_the_limit_are_held_and_known_numbers_are_not(adapter, sandbox, tenant):
    t, _ = tenant
    t.velocity_prefix_max = 0
    t.velocity_new_numbers_max = 2
    t.save()
    first = [message(t, to=recipient(20 + i)) for i in range(2)]
    release_and_send()
    assert KnownNumber.objects.filter(tenant=t).count() == 2
    again = [message(t, to=recipient(20 + i)) for i in range(2)]  # known now: not counted
    new = [message(t, to=recipient(30 + i)) for i in range(2)]
    release_and_send()
    assert states([*first, *again]) == [(Status.SENT, "")] * 4
    assert states(new) == [(Status.SCHEDULED, "held_for_review")] * 2
    hold = ReviewHold.objects.get()
    assert (hold.rule, hold.prefix, hold.held_count) == ("new_numbers", "", 2)
    assert "new numbers" in Message.objects.get(pk=new[0].pk).status_reason
    # What was let through is what the counter holds: the held ones were taken back off it.
    counter = VelocityCounter.objects.get(tenant=t, rule="new_numbers")
    assert counter.count == 2
    assert sandbox.stats()["submissions"] == 4


def test_paced_and_retried_messages_are_counted_once(tenant):
    t, _ = tenant
    now = timezone.now()
    cands = [
        release.Candidate(
            id=i, version=1, status=Status.SCHEDULED, tenant_id=t.pk, priority="bulk", sender="",
            segments=1, run_after=now, reason_code="paced", to=recipient(i),
        )
        for i in range(10)
    ]  # fmt: skip
    decision = velocity.velocity_gate(cands, now)
    assert len(decision.release) == 10 and not decision.park
    assert not VelocityCounter.objects.exists()


def test_held_messages_expire_at_their_validity_unsent(adapter, sandbox, tenant):
    t, _ = tenant
    msgs = [message(t, to=recipient(40 + i), validity=60) for i in range(4)]
    release_and_send()
    held = Message.objects.get(pk=msgs[3].pk)
    assert held.reason_code == "held_for_review" and held.run_after == held.expires_at
    later = timezone.now() + timedelta(seconds=120)
    from scheduling.dispatch import sweep

    sweep.due_expire(now=later, limit=100)
    assert states(msgs) == [(Status.SENT, "")] * 3 + [(Status.EXPIRED, "expired")]


def test_a_new_recipient_on_a_message_released_after_review_is_counted_and_held_again(
    adapter, sandbox, tenant, api
):
    """An operator released a hold on one prefix; the tenant then points a released message at a prefix
    already at its limit. The new number is counted like a new message's and held, not sent unchecked."""
    t, _ = tenant
    other = [message(t, to=recipient(100000 + j)) for j in range(3)]  # prefix 1415210: at its limit of 3
    msgs = [message(t, to=recipient(70 + i)) for i in range(5)]
    release_and_send()
    assert states([*other, *msgs]) == [(Status.SENT, "")] * 6 + [(Status.SCHEDULED, "held_for_review")] * 2
    assert admin_action(operator_client(), "release", ReviewHold.objects.get()).status_code == 302
    swapped, kept = msgs[3:]
    assert states([swapped, kept]) == [(Status.SCHEDULED, "review_released")] * 2

    resp = api.patch(f"/v1/messages/{swapped.public_id}", {"to": recipient(100010)}, format="json")
    assert resp.status_code == 200, resp.content
    assert resp.json()["reason_code"] == ""
    release_and_send()
    assert states([kept, swapped]) == [(Status.SENT, ""), (Status.SCHEDULED, "held_for_review")]
    hold = ReviewHold.objects.get(state="open")
    assert (hold.prefix, hold.held_count) == ("1415210", 1)
    assert sandbox.stats()["submissions"] == 7


def test_an_edit_that_keeps_the_recipient_is_not_counted_again(tenant, api):
    t, _ = tenant
    m = message(t, to=recipient(80), due_in=600)
    Message.objects.filter(pk=m.pk).update(reason_code="paced")
    assert api.patch(f"/v1/messages/{m.public_id}", {"body": "changed"}, format="json").status_code == 200
    assert api.patch(f"/v1/messages/{m.public_id}", {"to": recipient(80)}, format="json").status_code == 200
    assert Message.objects.get(pk=m.pk).reason_code == "paced"
