"""The tenant's suppression list: `GET|POST|DELETE /v1/suppressions` (delivery.guards.suppression does the
work
and the auditing; source `api`)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from delivery.flow import capacity
from delivery.guards import suppression
from delivery.models import Suppression, SuppressionSource
from smsgw.http import schema, strict_input
from smsgw.http.errors import field_error
from smsgw.http.pagination import StrictCursorPagination
from smsgw.http.strict_input import JsonTypedSerializer
from smsgw.values.phone import PhoneNumberError, normalize_e164

SENDER_HELP = (
    "The From number or messaging service SID the recipient opted out of; empty or absent: every sender "
    "of the tenant."
)


class SuppressionOutput(serializers.Serializer):
    number = serializers.CharField(help_text="E.164.")
    sender = serializers.CharField(help_text=SENDER_HELP)
    # The serializer's metaclass pops declared fields off the class, so this never shadows Field.source;
    # the stubs cannot know that (rest_framework/serializers.py, SerializerMetaclass._get_declared_fields).
    source = serializers.ChoiceField(choices=SuppressionSource.choices)  # type: ignore[assignment]
    created_at = serializers.DateTimeField()


class SuppressionInput(JsonTypedSerializer):
    number = serializers.CharField(max_length=32)
    sender = serializers.CharField(max_length=64, required=False, allow_blank=True, help_text=SENDER_HELP)

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({k[:64]: ["unknown field"] for k in unknown[:10]})
        return super().to_internal_value(data)


class SuppressionCursor(StrictCursorPagination):
    ordering = "-id"


LIST_PARAMS = frozenset(("number", "sender", "cursor", "page_size"))
DELETE_PARAMS = frozenset(("number", "sender"))


def _number(raw: str, field: str = "number") -> str:
    try:
        return normalize_e164(raw)
    except PhoneNumberError as exc:
        raise field_error(field, str(exc)) from exc


def _sender(raw: str) -> str:
    raw = (raw or "").strip()
    if raw and not capacity.is_valid_sender(raw):
        raise field_error(
            "sender", "an E.164 number, a short code, an alphanumeric sender id or a messaging service sid"
        )
    return raw


def _data(entry: Suppression) -> dict:
    return {
        "number": entry.number,
        "sender": entry.sender,
        "source": entry.source,
        "created_at": entry.created_at,
    }


class SuppressionsApi(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("number", str, description="Only this recipient (E.164). Else 400."),
            OpenApiParameter("sender", str, description="Only entries for this sender."),
            *schema.PAGE_PARAMETERS,
        ],
        responses=schema.paginated(SuppressionOutput, "SuppressionPage"),
        operation_id="suppressions_list",
        summary="The suppression list (newest first, cursor pages)",
    )
    def get(self, request):
        strict_input.query_params_check(request.query_params, LIST_PARAMS)
        qs = Suppression.objects.filter(tenant=request.user.tenant)
        if "number" in request.query_params:
            qs = qs.filter(number=_number(request.query_params["number"]))
        if "sender" in request.query_params:
            qs = qs.filter(sender=_sender(request.query_params["sender"]))
        paginator = SuppressionCursor()
        page = paginator.paginate_queryset(qs, request, view=self)
        assert page is not None  # None only without a page size; StrictCursorPagination always has one
        return paginator.get_paginated_response([_data(e) for e in page])

    @extend_schema(
        request=SuppressionInput,
        responses={201: SuppressionOutput, 200: SuppressionOutput},
        examples=[
            OpenApiExample("Every sender", value={"number": "+14155550123"}, request_only=True),
        ],
        summary="Add a number (201; 200 if it was already there)",
    )
    def post(self, request):
        if not isinstance(request.data, dict):
            raise field_error("body", "must be a JSON object")
        data = SuppressionInput(data=request.data)
        data.is_valid(raise_exception=True)
        number = _number(data.validated_data["number"])
        sender = _sender(data.validated_data.get("sender", ""))
        tenant = request.user.tenant
        added = suppression.suppression_add(
            tenant_id=tenant.pk,
            number=number,
            sender=sender,
            source=SuppressionSource.API,
            actor=str(request.user),
        )
        entry = Suppression.objects.get(tenant=tenant, number=number, sender=sender)
        return Response(_data(entry), status=201 if added else 200)

    @extend_schema(
        request=None,
        parameters=[
            OpenApiParameter("number", str, required=True, description="The recipient (E.164)."),
            OpenApiParameter(
                "sender", str, description="The entry's sender; absent: the every-sender entry."
            ),
        ],
        responses={204: None, 404: schema.NOT_FOUND},
        summary="Remove a number (the entry for exactly this sender)",
    )
    def delete(self, request):
        strict_input.query_params_check(request.query_params, DELETE_PARAMS)
        if "number" not in request.query_params:
            raise field_error("number", "required")
        number = _number(request.query_params["number"])
        sender = _sender(request.query_params.get("sender", ""))
        removed = suppression.suppression_remove(
            tenant_id=request.user.tenant.pk,
            number=number,
            sender=sender,
            source=SuppressionSource.API,
            actor=str(request.user),
        )
        if not removed:
            raise NotFound("This number is not on the suppression list for this sender.")
        return Response(status=204)
