"""Opening a message's page in the admin (its full number and body) is recorded, who and when, and the
record is read by the admin role only."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from scheduling.models import MessageView
from smsgw.console.roles import roles_sync
from tests.factories import message, tenant_with_key

pytestmark = pytest.mark.django_db

VIEWS = "/admin/scheduling/messageview/"


def staff(role: str) -> Client:
    roles_sync(apps)  # a flushed database (an earlier transactional test) lost the migration's groups
    user = User.objects.create_user(role, f"{role}@example.com", "pw-for-tests-only-1", is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    client = Client()
    client.force_login(user)
    return client


def test_opening_a_message_is_recorded_and_only_the_admin_role_reads_the_record():
    tenant = tenant_with_key("acme")[0]
    msg = message(tenant)
    operator, viewer, admin_role = staff("operator"), staff("viewer"), staff("admin")
    before = timezone.now()
    assert operator.get(f"/admin/scheduling/message/{msg.pk}/change/").status_code == 200
    assert viewer.get(f"/admin/scheduling/message/{msg.pk}/change/").status_code == 200
    assert operator.get("/admin/scheduling/message/").status_code == 200  # the list masks: not recorded
    assert operator.get("/admin/scheduling/message/999999/change/").status_code == 302  # no such message

    seen = list(MessageView.objects.order_by("id").values_list("username", "message_public_id", "tenant_id"))
    assert seen == [("operator", msg.public_id, tenant.pk), ("viewer", msg.public_id, tenant.pk)]
    assert all(before <= v <= timezone.now() for v in MessageView.objects.values_list("viewed_at", flat=True))

    page = admin_role.get(f"{VIEWS}?q={msg.public_id}")
    assert page.status_code == 200
    assert page.content.decode().count(msg.public_id) >= 2 and "operator" in page.content.decode()
    assert operator.get(VIEWS).status_code == 403
    assert viewer.get(VIEWS).status_code == 403
    view_id = MessageView.objects.first().pk
    assert admin_role.post(f"{VIEWS}{view_id}/delete/").status_code == 403  # nobody edits the record
    assert admin_role.get(f"{VIEWS}add/").status_code == 403
