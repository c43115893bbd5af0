"""The ``message.received`` notification (inbound.notify) for the OpenAPI schema's `webhooks`: its payload
is the reply as ``GET /v1/inbound/{id}`` shows it; signed and answered as every notification
(receipts.webhook_schema)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from inbound.api import EXAMPLE, InboundOutput
from receipts.webhook_schema import notification
from receipts.webhooks import INBOUND_EVENT


@extend_schema_field({"type": "string", "enum": [INBOUND_EVENT]})
class ReceivedType(serializers.CharField):
    pass


class MessageReceived(serializers.Serializer):
    type = ReceivedType()
    timestamp = serializers.DateTimeField(help_text="When it was processed.")

    def get_fields(self):
        fields = super().get_fields()
        # "data" is an attribute of every serializer, so it cannot be declared on the class.
        fields["data"] = InboundOutput()
        return fields


MESSAGE_RECEIVED = notification(
    INBOUND_EVENT,
    summary="A recipient replied",
    description="Sent to the tenant's webhook once per message a recipient sends to one of the tenant's "
    "numbers, after its keyword (STOP, HELP, the tenant's own) was applied: `action` and `action_result` "
    "say what it did.",
    payload=MessageReceived,
    example=(
        "A cancel reply",
        {"type": INBOUND_EVENT, "timestamp": "2026-12-04T09:00:03.500000Z", "data": EXAMPLE},
    ),
)
