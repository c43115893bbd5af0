"""Rows that copy a message's content, made directly (as the send worker, the receipt processor and the
webhook outbox write them), and history rows in retention.history's document shape."""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.utils import timezone

from delivery.models import Attempt, OptOutSignal
from receipts.models import ReceiptEvent, WebhookDelivery
from retention.models import MessageHistory
from retention.partitions import partitions_ensure
from scheduling.lifecycle import transitions
from scheduling.models import Message
from smsgw.models import Tenant


def copies_make(msg: Message) -> None:
    """One of each row that quotes the message's number or content."""
    now = timezone.now()
    transitions.event_record(
        msg.pk, kind="note", details={"reason": f"provider said {msg.to} is busy", "body": msg.body}
    )
    Attempt.objects.create(
        message=msg,
        number=1,
        provider="twilio",
        idempotency_token=secrets.token_hex(8),
        started_at=now,
        response={"http_status": 400, "error_message": f"The 'To' number {msg.to} is not valid"},
    )
    ReceiptEvent.objects.create(
        provider="vonage",
        provider_message_id=f"p{msg.pk}",
        raw_status="delivered",
        dedupe_key=secrets.token_hex(16),
        received_at=now,
        next_try_at=now,
        message=msg,
        payload={"msisdn": msg.to[1:], "to": "SMSGW", "status": "delivered"},
    )
    WebhookDelivery.objects.create(
        webhook_id=f"whmsg_{secrets.token_hex(12)}",
        tenant_id=msg.tenant_id,
        message=msg,
        event_type="message.status",
        payload={"type": "message.status", "data": {"id": msg.public_id, "to": msg.to, "metadata": {"k": 1}}},
        next_attempt_at=now,
        created_at=now,
    )
    WebhookDelivery.objects.create(
        webhook_id=f"whcb_{secrets.token_hex(12)}",
        tenant_id=msg.tenant_id,
        message=msg,
        event_type="twilio.status_callback",
        payload={"url": "https://example.com/cb", "params": {"To": msg.to, "MessageStatus": "sent"}},
        next_attempt_at=now,
        created_at=now,
    )
    OptOutSignal.objects.create(
        tenant_id=msg.tenant_id, to=msg.to, provider="twilio", error_code="21610", message=msg, created_at=now
    )


def history_make(tenant: Tenant, *, pk: int, to: str, body: str = "secret code 1234") -> MessageHistory:
    """A finished message as the history move leaves it (retention.history's document shape)."""
    now = timezone.now()
    created = now - timedelta(days=3)
    purge_on = (now + timedelta(days=30)).date()
    partitions_ensure({purge_on})  # PostgreSQL: the purge day's partition, as the history move makes it
    return MessageHistory.objects.create(
        id=pk,
        public_id=f"msg_{pk:024x}",
        tenant_id=tenant.pk,
        to=to,
        status="delivered",
        provider="twilio",
        provider_message_id=f"SM{pk:032x}",
        created_at=created,
        finished_at=created,
        moved_at=now,
        purge_on=purge_on,
        redact_on=(now + timedelta(days=10)).date(),
        document={
            "message": {
                "id": pk,
                "tenant_id": tenant.pk,
                "to": to,
                "body": body,
                "metadata": {"order": "A-1"},
                "status": "delivered",
                "from_number": "+14155550100",
                "created_at": created.isoformat(),
            },
            "events": [
                {
                    "kind": "created",
                    "from_status": "",
                    "to_status": "scheduled",
                    "actor": "apikey:x",
                    "details": {},
                    "created_at": created.isoformat(),
                },
                {
                    "kind": "note",
                    "from_status": "sent",
                    "to_status": "sent",
                    "actor": "system",
                    "details": {"reason": f"busy {to}"},
                    "created_at": created.isoformat(),
                },
            ],
            "attempts": [{"number": 1, "response": {"error_message": f"number {to[1:]} refused"}}],
            "receipts": [{"payload": {"To": "+1415*****23", "MessageStatus": "delivered"}}],
            "webhooks": [{"payload": {"data": {"to": to, "metadata": {"order": "A-1"}}}, "history": []}],
        },
    )


def quotes(value: object, number: str) -> bool:
    """Whether ``value`` (any JSON) still holds ``number`` in full, with or without its ``+``."""
    text = str(value)
    return number in text or number[1:] in text
