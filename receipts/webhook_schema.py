"""The tenant's notifications as the OpenAPI schema's `webhooks` (SPECTACULAR_SETTINGS["WEBHOOKS"]): the
payload receipts.webhooks builds for a status change, and how every notification is signed and answered
(the signature's headers: smsgw.http.schema_contract.WEBHOOK_HEADERS).
inbound.webhook_schema has the reply's. tests/receipts/test_webhook_schema.py validates real payloads, built
by the code that sends them, against these."""

from __future__ import annotations

from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiResponse,
    OpenApiWebhook,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers

from receipts.webhooks import EVENT_TYPE
from scheduling.choices import Status
from scheduling.lifecycle.kinds import EventKind
from scheduling.lifecycle.reasons import ReasonCode

SIGNED = (
    "Signed in the Standard Webhooks form (standardwebhooks.com): `webhook-signature` is `v1,` and the "
    "base64 HMAC-SHA256, keyed with the secret's bytes after `whsec_` (base64-decoded), of "
    "`<webhook-id>.<webhook-timestamp>.<the raw body>`. Check it on the raw body before parsing, refuse a "
    "`webhook-timestamp` more than a few minutes away from your clock, and de-duplicate by `webhook-id` "
    "(a retry and a replay carry the same one). Answer 2xx within the timeout "
    "(SMSGW_WEBHOOK_TIMEOUT_SECONDS); any other answer, or none, is retried with backoff, then "
    "dead-lettered (replay it with `POST /v1/webhook-deliveries/{webhook_id}/replay`). docs/architecture.md, "
    '"Delivery receipts and tenant webhooks".'
)


@extend_schema_field({"type": "string", "enum": [EVENT_TYPE]})
class StatusChangedType(serializers.CharField):
    pass


class StatusChangedData(serializers.Serializer):
    id = serializers.CharField(help_text="The message's id (`msg_...`).")
    status = serializers.ChoiceField(choices=Status.choices, help_text="Its new status.")
    previous_status = serializers.ChoiceField(choices=Status.choices, help_text="The status it left.")
    event = serializers.ChoiceField(
        choices=EventKind.choices,
        help_text="The kind of the timeline entry this change wrote (`GET /v1/messages/{id}/events`).",
    )
    version = serializers.IntegerField(
        help_text="Orders one message's notifications: they may arrive out of order, so keep the highest."
    )
    to = serializers.CharField(help_text="The recipient (E.164).")
    provider_status = serializers.CharField(help_text="The provider's own status word, or ''.")
    error_code = serializers.CharField(help_text="The provider's error code, or ''.")
    reason = serializers.CharField(help_text="Why, for a person (the message's `status_reason`), or ''.")
    reason_code = serializers.ChoiceField(
        choices=ReasonCode.choices,
        allow_blank=True,
        help_text="Why, for a program (the message's `reason_code`): why it failed, was undelivered, expired "
        "or was cancelled; '' when there is none. New codes may be added (docs/compatibility.md).",
    )
    metadata = serializers.DictField(help_text="The message's `metadata`, as given.")


class StatusChanged(serializers.Serializer):
    type = StatusChangedType()
    timestamp = serializers.DateTimeField(help_text="When the change happened.")

    def get_fields(self):
        fields = super().get_fields()
        # "data" is an attribute of every serializer, so it cannot be declared on the class.
        fields["data"] = StatusChangedData()
        return fields


STATUS_CHANGED_EXAMPLE = {
    "type": EVENT_TYPE,
    "timestamp": "2026-12-24T14:00:03.412000Z",
    "data": {
        "id": "msg_5f0c2a9b1d3e4f5a6b7c8d9e",
        "status": "delivered",
        "previous_status": "sent",
        "event": "delivered",
        "version": 5,
        "to": "+14155550123",
        "provider_status": "delivered",
        "error_code": "",
        "reason": "",
        "reason_code": "",
        "metadata": {"appointment": "A-1042"},
    },
}


def notification(
    name: str, *, summary: str, description: str, payload, example: tuple[str, dict]
) -> OpenApiWebhook:
    return OpenApiWebhook(
        name=name,
        decorator=extend_schema(
            # Not in the paths' table (smsgw.http.operation_ids): a webhook is an operation smsgw calls, named
            # after its event, e.g. message.status_changed -> onMessageStatusChanged.
            operation_id="on" + "".join(w.capitalize() for w in name.replace(".", "_").split("_")),
            summary=summary,
            description=f"{description}\n\n{SIGNED}",
            request={"application/json": payload},
            examples=[OpenApiExample(example[0], value=example[1])],
            responses={
                200: OpenApiResponse(
                    description="Any 2xx: delivered (the body is not read). Anything else is retried."
                )
            },
        ),
    )


MESSAGE_STATUS_CHANGED = notification(
    EVENT_TYPE,
    summary="A message's status changed",
    description="Sent to the tenant's webhook (`PUT /v1/webhook`) each time one of its messages changes "
    "status (queued, sent, delivered, failed, cancelled, ...), in the transaction of the change: none is "
    "lost, and none is sent for a change that was rolled back.",
    payload=StatusChanged,
    example=("Delivered", STATUS_CHANGED_EXAMPLE),
)
