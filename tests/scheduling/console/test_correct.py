"""Correcting a failed (dead-lettered) message before its replay: body, sender, or its route taken again
by today's rules, through the corrections service (checked as at acceptance, recorded on the timeline as
``corrected`` with the operator), then replayed; only a failed message can be corrected."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from scheduling.messages import corrections
from scheduling.models import Message, MessageEvent, Status
from smsgw.domain_errors import ConflictError, InvalidInput
from tests.delivery.routing.helpers import route_rule
from tests.factories import message, tenant_with_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def ops(db):
    user = User.objects.create_superuser("ops", "ops@example.com", "pw-for-tests-only")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


def _dead(tenant) -> Message:
    msg = message(tenant, body="Your code is 1234")
    Message.objects.filter(pk=msg.pk).update(
        status=Status.FAILED, run_after=None, failed_at=timezone.now(), status_reason="invalid content"
    )
    msg.refresh_from_db()
    return msg


def test_correct_the_body_then_replay_from_the_messages_page(ops, tenant):
    msg = _dead(tenant)
    page = ops.get(f"/admin/scheduling/message/{msg.pk}/change/").content.decode()
    assert f"/admin/scheduling/message/{msg.pk}/correct/" in page
    form = ops.get(f"/admin/scheduling/message/{msg.pk}/correct/").content.decode()
    assert "Your code is 1234" in form
    longer = "Your code is 1234. " * 10  # 190 characters: two segments
    done = ops.post(
        f"/admin/scheduling/message/{msg.pk}/correct/",
        {"body": longer, "sender": msg.from_number, "replay": "on"},
        follow=True,
    )
    assert "Corrected and replayed." in done.content.decode()
    msg.refresh_from_db()
    assert (msg.body, msg.segments, msg.status, msg.attempt_count) == (longer, 2, Status.QUEUED, 0)
    kinds = list(MessageEvent.objects.filter(message=msg).order_by("id").values_list("kind", "actor"))
    assert kinds[-2:] == [("corrected", "admin:ops"), ("replayed", "admin:ops")]
    corrected = MessageEvent.objects.get(message=msg, kind="corrected")
    assert (corrected.from_status, corrected.to_status) == (Status.FAILED, Status.FAILED)
    assert corrected.details == {"changed": ["body"], "old_segments": 1, "new_segments": 2}


def test_route_again_by_todays_rules(tenant):
    msg = _dead(tenant)
    assert msg.route == ""
    route_rule(None, "backup", legs=((msg.provider, "", "", 1),))
    corrections.message_correct(
        tenant=tenant, public_id=msg.public_id, actor="admin:ops", data={"reroute": True}
    )
    msg.refresh_from_db()
    assert (msg.route, msg.status) == ("all:backup", Status.FAILED)  # a rule for all tenants
    details = MessageEvent.objects.get(message=msg, kind="corrected").details
    assert details["changed"] == ["route"] and details["old_route"].startswith("default (")
    assert details["new_route"] == f"all:backup ({msg.provider})"


def test_only_a_failed_message_and_only_what_the_api_accepts(ops, tenant):
    msg = _dead(tenant)
    with pytest.raises(InvalidInput) as refused:
        corrections.message_correct(
            tenant=tenant, public_id=msg.public_id, actor="a", data={"from": "+19995550000"}
        )
    assert refused.value.field == "from"  # not one of the tenant's senders
    page = ops.post(
        f"/admin/scheduling/message/{msg.pk}/correct/", {"body": "  ", "sender": ""}
    ).content.decode()
    assert "This field is required" in page or "body:" in page
    live = message(tenant, due_in=3600)
    with pytest.raises(ConflictError):
        corrections.message_correct(tenant=tenant, public_id=live.public_id, actor="a", data={"body": "x"})
    assert not MessageEvent.objects.filter(kind="corrected").exists()
    assert Message.objects.get(pk=msg.pk).body == "Your code is 1234"
