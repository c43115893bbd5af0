"""Reads behind the tenant's webhook-delivery list (``GET /v1/webhook-deliveries``). Every query starts from
the tenant; a filter that can never match is a 400 naming it, not an empty page."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db.models import QuerySet
from django.utils.dateparse import parse_datetime

from receipts.models import WebhookDelivery, WebhookStatus
from receipts.webhooks import EVENT_TYPE, INBOUND_EVENT, INCOMING_FORWARD, STATUS_CALLBACK
from scheduling.models import Message
from smsgw.domain_errors import InvalidInput
from smsgw.models import Tenant

# Every kind of notification the outbox holds: the tenant webhook's events, and the Twilio-compatible
# API's status callbacks and forwarded incoming messages.
EVENT_TYPES = (EVENT_TYPE, INBOUND_EVENT, STATUS_CALLBACK, INCOMING_FORWARD)
LIST_PARAMS = frozenset(
    ("status", "event_type", "message", "created_after", "created_before", "cursor", "page_size")
)


def _choices(params, name: str, allowed) -> list[str] | None:
    raw = params.get(name)
    if not raw:
        return None
    values = [v.strip() for v in raw.split(",") if v.strip()]
    bad = [v for v in values if v not in allowed]
    if bad:
        # The offending value is not echoed (docs/api.md): the allowed ones are.
        raise InvalidInput(name, f"unknown {name}; one of {', '.join(allowed)}")
    return values


def _instant(params, name: str) -> datetime | None:
    raw = params.get(name)
    if raw is None:
        return None
    try:
        # ASCII: parse_datetime's fallback pattern reads any Unicode digit as int() does.
        value = parse_datetime(raw) if raw.isascii() else None
        if value is not None:
            value.astimezone(UTC)  # OverflowError at the edges of datetime's range
    except (ValueError, OverflowError):
        value = None
    if value is None or value.tzinfo is None:
        raise InvalidInput(name, "must be an ISO 8601 time with an offset, e.g. 2026-12-01T09:00:00Z")
    return value


def webhook_delivery_list(*, tenant: Tenant, params) -> QuerySet[WebhookDelivery]:
    """The tenant's deliveries, filtered (``LIST_PARAMS``); the view pages them newest first."""
    lookups: dict[str, Any] = {}
    statuses = _choices(params, "status", WebhookStatus.values)
    if statuses:
        lookups["status__in"] = statuses
    kinds = _choices(params, "event_type", EVENT_TYPES)
    if kinds:
        lookups["event_type__in"] = kinds
    for name, lookup in (("created_after", "created_at__gte"), ("created_before", "created_at__lt")):
        value = _instant(params, name)
        if value is not None:
            lookups[lookup] = value
    qs = WebhookDelivery.objects.filter(tenant=tenant, **lookups).select_related("message")
    public_id = params.get("message")
    if public_id is not None:
        if not public_id or len(public_id) > 64:
            raise InvalidInput("message", "must be a message id (msg_…)")
        # Through the message row (its unique public id), not a scan of the payloads. A message that has
        # moved to history has no row: its deliveries are not found by it (they are still listed).
        pk = Message.objects.filter(tenant=tenant, public_id=public_id).values_list("pk", flat=True).first()
        qs = qs.filter(message_id=pk) if pk is not None else qs.none()
    return qs


def delivery_message_id(delivery: WebhookDelivery) -> str | None:
    """The id of the message a delivery is about: its row's, else (a message moved to history) the one its
    status payload names."""
    if delivery.message is not None:
        return delivery.message.public_id
    if delivery.event_type == EVENT_TYPE:
        return (delivery.payload.get("data") or {}).get("id")
    return None
