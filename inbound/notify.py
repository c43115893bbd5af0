"""The tenant's ``message.received`` webhook: one row in the tenant-webhook outbox (receipts.webhooks) per
inbound message, written in the transaction that processes it, so it is made once (its ``webhook-id`` is
stable across retries and replays) and signed, SSRF-guarded, retried and dead-lettered like every other
notification."""

from __future__ import annotations

import secrets
from datetime import datetime

from inbound.models import InboundMessage
from receipts.models import WebhookDelivery
from receipts.webhooks import INBOUND_EVENT
from smsgw.values.timeutil import utc_text


def inbound_data(inbound: InboundMessage) -> dict:
    """The message as the tenant sees it: the webhook's ``data`` and the API's resource."""
    return {
        "id": inbound.public_id,
        "from": inbound.from_number,
        "to": inbound.to_number,
        "sender_pool": inbound.sender_pool,
        "body": inbound.body,
        "segments": inbound.segments,
        "keyword": inbound.keyword,
        "action": inbound.action,
        "action_result": inbound.action_result,
        "needs_review": inbound.needs_review,
        "in_reply_to": inbound.in_reply_to or None,
        "conversation": inbound.conversation,
        "provider": inbound.provider,
        "parts_missing": inbound.parts_missing,
        "received_at": utc_text(inbound.received_at),
    }


def received_delivery(
    inbound: InboundMessage, *, webhook_url: str, replied_id: int | None, now: datetime
) -> WebhookDelivery | None:
    """The notification a processed reply owes its tenant (unsaved: the processor writes a batch's at
    once), or None when the tenant has no webhook."""
    if not webhook_url or inbound.tenant_id is None:
        return None
    return WebhookDelivery(
        webhook_id=f"whin_{secrets.token_hex(12)}",
        tenant_id=inbound.tenant_id,
        message_id=replied_id,
        event_type=INBOUND_EVENT,
        payload={"type": INBOUND_EVENT, "timestamp": utc_text(now), "data": inbound_data(inbound)},
        next_attempt_at=now,
        created_at=now,
    )
