"""The delivery incidents in the admin: holds (with the audited clear action), duplicate submissions and
opt-outs render; nothing can be added or deleted; numbers are masked."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from delivery.flow import provider_holds as holds
from delivery.models import DuplicateSubmission, OptOutSignal, ProviderHold
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from tests.factories import message, tenant_with_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(db):
    User.objects.create_superuser("ops", "ops@example.com", "pw-for-tests-only")
    client = Client()
    client.force_login(User.objects.get(username="ops"))
    return client


def test_hold_duplicate_and_opt_out_pages_render_and_clear_releases(admin_client):
    holds._cache.clear()
    tenant, _ = tenant_with_key("acme")
    msg = message(tenant)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    hold = holds.hold_open(
        provider="twilio",
        account="AC1",
        scope="sender",
        scope_value=msg.from_number,
        error_code="30034",
        reason="US A2P 10DLC: sender not registered",
    )
    Message.objects.filter(pk=msg.pk).update(reason_code=holds.REASON_HELD)
    DuplicateSubmission.objects.create(
        message=msg,
        provider="twilio",
        provider_message_id="SM" + "1" * 32,
        detected_at=timezone.now(),
        detected_by="receipt",
    )
    OptOutSignal.objects.create(
        tenant_id=tenant.pk,
        to=msg.to,
        provider="twilio",
        error_code="21610",
        message=msg,
        created_at=timezone.now(),
    )
    for url in (
        "/admin/delivery/providerhold/?state=open",
        f"/admin/delivery/providerhold/{hold.id}/change/",
        "/admin/delivery/duplicatesubmission/",
        "/admin/delivery/optoutsignal/",
    ):
        response = admin_client.get(url)
        assert response.status_code == 200, url
    page = admin_client.get("/admin/delivery/optoutsignal/").content.decode()
    assert msg.to not in page and msg.to[-2:] in page
    assert admin_client.get("/admin/delivery/providerhold/add/").status_code == 403

    response = admin_client.post(
        "/admin/delivery/providerhold/", {"action": "clear", "_selected_action": [hold.id]}, follow=True
    )
    assert response.status_code == 200 and "Released 1 held messages" in response.content.decode()
    stored = ProviderHold.objects.get(pk=hold.id)
    assert stored.cleared_at is not None and stored.cleared_by == "admin:ops"
    assert LogEntry.objects.filter(object_id=str(hold.id), change_message="cleared the hold").exists()
    msg.refresh_from_db()
    assert msg.reason_code == "" and msg.events.get(kind="hold_released").actor == "admin:ops"
