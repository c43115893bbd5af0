"""Inbound messages under the tenant's horizons and the recipient erase: at the content horizon the body
goes and the contact is masked (the row, its parts, its message.received webhooks); at the record horizon
the rows go with their parts; a pending one is never touched; the erase of a number removes what that
person sent the tenant, and nothing of another tenant's or another person's."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from inbound.models import InboundMessage, InboundPart, InboundState
from receipts.models import WebhookDelivery
from receipts.webhooks import INBOUND_EVENT
from retention.inbound import inbound_content_due, inbound_prune
from retention.jobs import retention_run
from retention.models import RetentionAction, RetentionAudit, TenantRetention
from scheduling.models import Message, Status
from tests.factories import RECIPIENT, SENDER, message, tenant_with_key
from tests.inbound_rows import inbound_receive, inbound_row

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

OTHER_NUMBER = "+12025550143"
HOOK = "https://hooks.example.com/sms"


def _received_hook(row: InboundMessage, *, days_ago: float = 0) -> WebhookDelivery:
    """Its message.received delivery, as inbound.notify writes it (when it was processed)."""
    at = timezone.now() - timedelta(days=days_ago)
    data = {"id": row.public_id, "from": row.from_number, "to": row.to_number, "body": row.body}
    data |= {"conversation": f"{row.to_number}:{row.from_number}", "received_at": at.isoformat()}
    return WebhookDelivery.objects.create(
        webhook_id=f"whin_{row.pk}",
        tenant_id=row.tenant_id,
        event_type=INBOUND_EVENT,
        payload={"type": INBOUND_EVENT, "data": data},
        status="delivered",
        history=[{"at": at.isoformat(), "code": 200, "error": f"echo {row.from_number}"}],
        next_attempt_at=at,
        created_at=at,
    )


def _holds(row: InboundMessage) -> bool:
    row.refresh_from_db()
    return bool(row.body) and row.from_number == RECIPIENT


def test_content_goes_at_the_tenants_horizon_with_parts_and_webhooks():
    tenant, _ = tenant_with_key()
    TenantRetention.objects.create(tenant=tenant, content_days=7)
    other, _ = tenant_with_key("other")
    old = inbound_row(tenant, days_ago=8, parts=2, body="Yes, see you Tuesday")
    hook = _received_hook(old, days_ago=8)
    recent = inbound_row(tenant, days_ago=6)
    recent_hook = _received_hook(recent, days_ago=6)
    pending = inbound_row(None, state=InboundState.PENDING, days_ago=40)
    unrouted = inbound_row(None, state=InboundState.UNROUTED, days_ago=8)  # the defaults: 30 days
    default = inbound_row(other, days_ago=8)

    done = inbound_content_due(now=timezone.now())

    assert done == {"inbound_messages": 1, "inbound_parts": 2, "webhook_deliveries": 1}
    old.refresh_from_db()
    assert old.body == "" and old.from_number == "+1415*****23" and RECIPIENT not in old.conversation
    assert old.to_number == SENDER and old.state == InboundState.ROUTED  # the record stays
    assert RECIPIENT[1:] not in str(old.payload) and old.payload["api-key"] == "abc"
    for part in InboundPart.objects.filter(message=old):
        assert part.body == "" and "*" in part.from_number and RECIPIENT[1:] not in str(part.payload)
    hook.refresh_from_db()
    data = hook.payload["data"]
    assert data["body"] == "" and data["from"] == "+1415*****23" and data["to"] == SENDER
    assert RECIPIENT not in str(hook.payload) and RECIPIENT not in str(hook.history)
    assert data["id"] == old.public_id  # the evidence stays
    for kept in (recent, pending, unrouted, default):
        assert _holds(kept), kept
    recent_hook.refresh_from_db()
    assert recent_hook.payload["data"]["body"] == "Yes, see you Tuesday"
    assert inbound_content_due(now=timezone.now()) == {}  # a repeat finds nothing

    later = inbound_content_due(now=timezone.now() + timedelta(days=23))
    assert later["inbound_messages"] == 3  # recent, then unrouted and the other tenant's at 30 days
    assert _holds(pending)  # never processed: never touched


def test_records_go_at_the_record_horizon_with_their_parts_and_the_job_audits_counts():
    tenant, _ = tenant_with_key()
    TenantRetention.objects.create(tenant=tenant, content_days=7, record_days=30)
    old = inbound_row(tenant, days_ago=31, parts=3)
    kept = inbound_row(tenant, days_ago=29)
    pending = inbound_row(None, state=InboundState.PENDING, days_ago=400)
    unrouted = inbound_row(None, state=InboundState.UNROUTED, days_ago=366)  # the default: 365 days

    totals = retention_run(now=timezone.now())

    assert not InboundMessage.objects.filter(pk__in=[old.pk, unrouted.pk]).exists()
    assert not InboundPart.objects.filter(message_id=old.pk).exists()
    assert totals["record_horizon"]["inboundmessage"] == 2
    assert totals["record_horizon"]["inboundpart"] == 3
    # The content pass comes first: the 29-day-old one (past its 7 days) and the two about to go.
    assert totals["content_horizon"]["inbound_messages"] == 3
    kept.refresh_from_db()
    assert kept.body == "" and "*" in kept.from_number
    assert _holds(pending)
    audit = RetentionAudit.objects.get(action=RetentionAction.RECORD_HORIZON)
    assert audit.counts["inboundmessage"] == 2 and RECIPIENT not in str(audit.counts)
    assert inbound_prune(now=timezone.now()) == {}


def test_erase_removes_what_the_person_sent_and_its_webhooks(settings):
    tenant, key = tenant_with_key("acme")
    other, _ = tenant_with_key("other", default_from="+14155550177")
    from smsgw.models import Tenant

    Tenant.objects.filter(pk__in=[tenant.pk, other.pk]).update(webhook_url=HOOK)
    asked = message(tenant, status=Status.DELIVERED, body="Reply C to cancel")
    Message.objects.filter(pk=asked.pk).update(sent_at=timezone.now() - timedelta(minutes=5))
    reply = inbound_receive("C please, I am away")  # answers `asked`: its webhook names it
    unsolicited = inbound_receive("Who is this?", to_number="+14155550177")  # the other tenant's number
    Tenant.objects.filter(pk=other.pk).update(webhook_url="")
    first = inbound_receive("hello there", from_number=OTHER_NUMBER)
    assert (reply.tenant_id, reply.in_reply_to, unsolicited.tenant_id) == (
        tenant.pk,
        asked.public_id,
        other.pk,
    )
    alone = inbound_row(tenant, body="Stop texting me", needs_review=True)  # no in_reply_to
    alone_hook = _received_hook(alone)
    hooks = WebhookDelivery.objects.filter(event_type=INBOUND_EVENT)
    assert hooks.filter(message_id=asked.pk).count() == 1

    response = APIClient(HTTP_AUTHORIZATION=f"Bearer {key}").post(
        "/v1/recipients/erase", {"to": RECIPIENT}, format="json"
    )

    assert response.status_code == 200, response.content
    counts = response.json()["counts"]
    assert counts["inbound_messages"] == 2
    for row in (reply, alone):
        row.refresh_from_db()
        assert row.body == "" and row.from_number == "+1415*****23", row.public_id
    for delivery in (hooks.get(message_id=asked.pk), alone_hook):
        delivery.refresh_from_db()
        assert delivery.payload["data"]["body"] == "" and RECIPIENT not in str(delivery.payload)
    assert _holds(unsolicited)  # the other tenant's
    first.refresh_from_db()
    assert first.body == "hello there" and first.from_number == OTHER_NUMBER  # another person
    again = APIClient(HTTP_AUTHORIZATION=f"Bearer {key}").post(
        "/v1/recipients/erase", {"to": RECIPIENT}, format="json"
    )
    assert again.json()["counts"]["inbound_messages"] == 0
