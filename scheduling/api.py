"""Tenant API for messages (SPEC §7). One thin view per endpoint; rules live in services/selectors."""

from __future__ import annotations

import json

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduling import selectors, services
from scheduling.models import Message, Priority, Status
from smsgw.errors import field_error

MAX_METADATA_BYTES = 4096


def _metadata(value):
    if len(json.dumps(value)) > MAX_METADATA_BYTES:
        raise serializers.ValidationError(f"must serialise to at most {MAX_METADATA_BYTES} bytes of JSON")
    return value


class StrictSerializer(serializers.Serializer):
    """Unknown keys are an error: a typo such as `sendAt` must not silently send now."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({k: ["unknown field"] for k in unknown})
        return super().to_internal_value(data)


_message_fields = {
    "to": serializers.CharField(max_length=32, help_text="Recipient in E.164, e.g. +14155550100."),
    "body": serializers.CharField(max_length=1600, trim_whitespace=False),
    "from": serializers.CharField(
        max_length=32, required=False, help_text="E.164 number or alphanumeric id."
    ),
    "messaging_service_sid": serializers.CharField(max_length=34, required=False),
    "send_at": serializers.CharField(
        max_length=64,
        required=False,
        allow_null=True,
        help_text="ISO 8601. With an offset (or Z): that instant. Without: a local wall time in `timezone`.",
    ),
    "timezone": serializers.CharField(
        max_length=64, required=False, allow_null=True, help_text="IANA zone, e.g. America/New_York."
    ),
    "dst_policy": serializers.ChoiceField(
        choices=["earlier", "later"],
        required=False,
        help_text="For a local time that occurs twice (DST fall-back): the first (earlier) or second.",
    ),
    "priority": serializers.ChoiceField(choices=Priority.choices, required=False),
    "validity_seconds": serializers.IntegerField(min_value=60, max_value=7 * 86400, required=False),
    "metadata": serializers.DictField(required=False, validators=[_metadata]),
}
MessageCreateInput = type("MessageCreateInput", (StrictSerializer,), dict(_message_fields))
MessageUpdateInput = type(
    "MessageUpdateInput",
    (StrictSerializer,),
    {k: type(f)(**{**f._kwargs, "required": False}) for k, f in _message_fields.items()},
)


class MessageOutput(serializers.Serializer):
    id = serializers.CharField(source="public_id")
    status = serializers.CharField()
    status_reason = serializers.CharField()
    to = serializers.CharField()
    body = serializers.CharField()
    encoding = serializers.CharField()
    segments = serializers.IntegerField()
    priority = serializers.CharField()
    messaging_service_sid = serializers.CharField()
    metadata = serializers.DictField()
    requested = serializers.SerializerMethodField()
    due_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    provider = serializers.CharField()
    provider_message_id = serializers.CharField(allow_null=True)
    provider_status = serializers.CharField()
    error_code = serializers.CharField()
    attempts = serializers.IntegerField(source="attempt_count")
    version = serializers.IntegerField()
    timestamps = serializers.SerializerMethodField()

    def get_fields(self):
        fields = super().get_fields()
        fields["from"] = serializers.CharField(source="from_number")
        return fields

    @extend_schema(exclude=True)
    def get_requested(self, m: Message) -> dict:
        return {
            "send_at": m.requested_send_at or None,
            "local_time": m.requested_local_time.replace(tzinfo=None).isoformat()
            if m.requested_local_time
            else None,
            "timezone": m.requested_timezone or None,
            "dst_policy": m.dst_policy,
            "dst_adjustment": m.dst_adjustment,
        }

    def get_timestamps(self, m: Message) -> dict:
        names = (
            "created_at",
            "queued_at",
            "sending_at",
            "sent_at",
            "delivered_at",
            "failed_at",
            "cancelled_at",
            "expired_at",
        )
        return {n: (getattr(m, n).isoformat() if getattr(m, n) else None) for n in names}


class EventOutput(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    from_status = serializers.CharField()
    to_status = serializers.CharField()
    actor = serializers.CharField()
    details = serializers.DictField()
    created_at = serializers.DateTimeField()


class MessageCursor(CursorPagination):
    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


def _actor(request) -> str:
    return str(request.user)


def _idempotency_key(request) -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not key.strip() or len(key) > 255:
        raise field_error("Idempotency-Key", "must be 1-255 characters")
    return key.strip()


class MessagesApi(APIView):
    @extend_schema(
        request=MessageCreateInput,
        responses={201: MessageOutput, 200: MessageOutput},
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER)],
        summary="Send a message now or at a time",
    )
    def post(self, request):
        key = _idempotency_key(request)
        data = MessageCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        message, created = services.message_create(
            tenant=request.user.tenant, actor=_actor(request), data=data.validated_data, idempotency_key=key
        )
        headers = {"Location": f"/v1/messages/{message.public_id}"}
        if not created:
            headers["Idempotent-Replayed"] = "true"
        return Response(MessageOutput(message).data, status=201 if created else 200, headers=headers)

    @extend_schema(
        responses=MessageOutput(many=True),
        parameters=[
            OpenApiParameter("status", str, description="Comma-separated statuses."),
            OpenApiParameter("to", str, description="Recipient, E.164."),
            OpenApiParameter("created_after", str),
            OpenApiParameter("created_before", str),
            OpenApiParameter("due_after", str),
            OpenApiParameter("due_before", str),
            OpenApiParameter("cursor", str),
            OpenApiParameter("page_size", int),
        ],
        summary="List messages (newest first, cursor pages)",
    )
    def get(self, request):
        qs = selectors.message_list(tenant=request.user.tenant, params=request.query_params)
        paginator = MessageCursor()
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response(MessageOutput(page, many=True).data)


class MessageDetailApi(APIView):
    @extend_schema(responses=MessageOutput, summary="Get one message")
    def get(self, request, public_id: str):
        return Response(
            MessageOutput(services.message_get(tenant=request.user.tenant, public_id=public_id)).data
        )

    @extend_schema(
        request=MessageUpdateInput,
        responses=MessageOutput,
        summary="Reschedule or edit a scheduled message (409 once queued or later)",
    )
    def patch(self, request, public_id: str):
        data = MessageUpdateInput(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        message = services.message_update(
            tenant=request.user.tenant, public_id=public_id, actor=_actor(request), data=data.validated_data
        )
        return Response(MessageOutput(message).data)


class MessageCancelApi(APIView):
    @extend_schema(
        request=None,
        responses={
            200: MessageOutput,
            409: inline_serializer("CancelConflict", {"error": serializers.DictField()}),
        },
        summary="Cancel (scheduled or queued only; 409 with the real stage otherwise)",
    )
    def post(self, request, public_id: str):
        message = services.message_cancel(
            tenant=request.user.tenant, public_id=public_id, actor=_actor(request)
        )
        return Response(MessageOutput(message).data, status=status.HTTP_200_OK)


class MessageEventsApi(APIView):
    @extend_schema(responses=EventOutput(many=True), summary="The message's timeline, oldest first")
    def get(self, request, public_id: str):
        message = services.message_get(tenant=request.user.tenant, public_id=public_id)
        events = selectors.message_events(message=message)
        return Response(
            {
                "message": message.public_id,
                "status": message.status,
                "events": EventOutput(events, many=True).data,
            }
        )


__all__ = ["MessageCancelApi", "MessageDetailApi", "MessageEventsApi", "MessagesApi", "Status"]
