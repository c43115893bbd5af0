"""The tenant's retention horizons: ``GET``/``PUT /v1/retention`` (docs/retention.md)."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from retention.horizons import MAX_DAYS, horizons_for, tenant_retention_set
from retention.models import TenantRetention
from scheduling.messages.api import StrictSerializer


class RetentionInput(StrictSerializer):
    content_days = serializers.IntegerField(
        min_value=1,
        max_value=MAX_DAYS,
        allow_null=True,
        help_text="Days after a message is final before its content goes (body, full number, metadata, "
        "webhook payloads); null: the gateway's default.",
    )
    record_days = serializers.IntegerField(
        min_value=1,
        max_value=MAX_DAYS,
        allow_null=True,
        help_text="Days after a message is final before its record goes; null: the gateway's default.",
    )


class RetentionOutput(serializers.Serializer):
    content_days = serializers.IntegerField(allow_null=True, help_text="The tenant's own, or null")
    record_days = serializers.IntegerField(allow_null=True, help_text="The tenant's own, or null")
    effective_content_days = serializers.IntegerField()
    effective_record_days = serializers.IntegerField()
    history_after_hours = serializers.IntegerField(
        help_text="Hours after a message is final before it moves to history; also how long an "
        "Idempotency-Key is remembered."
    )


def _output(tenant_id: int) -> dict:
    own = TenantRetention.objects.filter(tenant_id=tenant_id).first()
    effective = horizons_for(tenant_id)
    return {
        "content_days": own.content_days if own else None,
        "record_days": own.record_days if own else None,
        "effective_content_days": effective.content_days,
        "effective_record_days": effective.record_days,
        "history_after_hours": settings.HISTORY_AFTER_HOURS,
    }


class RetentionApi(APIView):
    required_scopes = {"GET": "retention:read", "PUT": "retention:write"}

    @extend_schema(
        responses=RetentionOutput,
        description=(
            "How many days message content (`content_days`) and records (`record_days`) are kept, the "
            "tenant's own or the gateway's defaults."
        ),
        summary="The tenant's retention horizons",
    )
    def get(self, request):
        return Response(RetentionOutput(_output(request.user.tenant.pk)).data)

    @extend_schema(
        request=RetentionInput,
        responses=RetentionOutput,
        description=(
            "Sets how long content and records are kept, within the gateway's bounds; content is never kept "
            "longer than records. The retention job applies them daily."
        ),
        summary="Set the retention horizons",
    )
    def put(self, request):
        data = RetentionInput(data=request.data)
        data.is_valid(raise_exception=True)
        tenant_retention_set(
            tenant_id=request.user.tenant.pk,
            content_days=data.validated_data["content_days"],
            record_days=data.validated_data["record_days"],
            actor=str(request.user),
        )
        return Response(RetentionOutput(_output(request.user.tenant.pk)).data)
