"""Destination guards across real processes (docs/guards.md): beat, the sweep and the send worker as
separate processes against the sandbox. A prefix over the tenant's velocity limit is held for review by
the real sweep, never submitted while held, and sent once each after an operator releases it in the
admin; a destination refused after acceptance is cancelled by the real send worker, never submitted."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client

from delivery.models import ReviewHold
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from smsgw.console.roles import roles_sync
from tests.factories import message, recipient, tenant_with_key

pytestmark = pytest.mark.integration
LIMIT = 4
UK = "+442079460123"


def test_a_held_prefix_released_by_an_operator_is_sent_once_each(pipeline):
    tenant, _ = tenant_with_key("acme", velocity_prefix_max=LIMIT, allowed_countries=["US", "GB"])
    msgs = [message(tenant, to=recipient(i)) for i in range(10)]
    abroad = message(tenant, to=UK)
    transitions.transition(
        abroad.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued"
    )
    tenant.allowed_countries = []  # narrowed after acceptance: the worker must refuse it
    tenant.save(update_fields=["allowed_countries"])
    ids = [m.pk for m in msgs]
    connection.close()
    pipeline.worker()
    pipeline.beat()

    pipeline.wait_until(
        lambda: (
            Message.objects.filter(pk__in=ids, status=Status.SENT).count() == LIMIT
            and Message.objects.filter(pk__in=ids, reason_code="held_for_review").count() == len(ids) - LIMIT
            and Message.objects.filter(pk=abroad.pk, status=Status.CANCELLED).exists()
        ),
        timeout=60,
        what="the first messages sent, the rest held for review, the refused one cancelled",
    )
    # A message to another prefix, made after the hold, goes out: the sweep kept running, and the held
    # ones were still not submitted.
    other = message(tenant, to=recipient(10_000))  # +1415201…: another 7-digit prefix
    connection.close()
    pipeline.wait_all_final([other.pk], timeout=30)
    assert Message.objects.get(pk=other.pk).status == Status.SENT
    assert sum(pipeline.submissions_by_recipient().values()) == LIMIT + 1
    held = Message.objects.filter(pk__in=ids, reason_code="held_for_review")
    assert held.count() == len(ids) - LIMIT and {m.status for m in held} == {Status.SCHEDULED}

    roles_sync(apps)
    user = User.objects.create_user("op", "op@example.com", "pw-for-tests-only-1", is_staff=True)
    user.groups.add(Group.objects.get(name="operator"))
    client = Client()
    client.force_login(user)
    hold = ReviewHold.objects.get()
    resp = client.post("/admin/delivery/reviewhold/", {"action": "release", "_selected_action": [hold.pk]})
    assert resp.status_code == 302
    connection.close()

    pipeline.wait_all_final(ids, timeout=60)
    assert {m.status for m in Message.objects.filter(pk__in=ids)} == {Status.SENT}
    assert pipeline.submissions_by_recipient() == {recipient(i): 1 for i in [*range(10), 10_000]}
    refused = Message.objects.get(pk=abroad.pk)
    assert (refused.status, refused.reason_code, refused.attempt_count) == (
        Status.CANCELLED,
        "destination_refused",
        0,
    )
    hold.refresh_from_db()
    assert (hold.state, hold.closed_by, hold.closed_count) == ("released", "admin:op", len(ids) - LIMIT)
