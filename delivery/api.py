"""The tenant's sending capacity: `GET /v1/capacity`, `PUT|DELETE /v1/capacity/senders/<sender>` (its own
cap on a sender it owns alone, never above the operator's rate: delivery.flow.capacity)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from delivery.flow import capacity
from smsgw.http import schema, strict_input
from smsgw.http.errors import field_error
from smsgw.http.strict_input import JsonTypedSerializer

MAX_RATE = 10_000.0


class SenderRateInput(JsonTypedSerializer):
    segments_per_second = serializers.FloatField(min_value=0.001, max_value=MAX_RATE)

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({k: ["unknown field"] for k in unknown})
        return super().to_internal_value(data)


CapacityOutput = inline_serializer(
    "Capacity",
    {
        "provider": serializers.CharField(help_text="The default provider (`providers` has every one)."),
        "provider_status": serializers.DictField(help_text="The default provider's circuit."),
        "tenant": serializers.DictField(),
        "quotas": serializers.DictField(help_text="Daily quota window and pending messages (limits.quotas)."),
        "senders": serializers.ListField(
            child=serializers.DictField(), help_text="The default provider's senders and their rates."
        ),
        "providers": serializers.ListField(
            child=serializers.DictField(),
            help_text="Every provider the tenant sends through (the default first, then each one its routes "
            "use): `provider`, `account` (empty: the provider's configured account), `default`, "
            "`provider_status` and `senders`, as above.",
        ),
    },
)
PROVIDER_PARAMETER = OpenApiParameter(
    "provider",
    str,
    description="The provider of the sender (one of `providers` in `GET /v1/capacity`). Absent: the one "
    "provider that lists this sender, else the default provider. Else 400 naming `provider`.",
)
SENDER_PARAMS = frozenset(("provider",))


class CapacityApi(APIView):
    required_scopes = {"GET": "capacity:read"}

    @extend_schema(
        responses=CapacityOutput,
        description=(
            "What limits the tenant's sending now: each sender's rate (segments per second, the tenant's cap "
            "and the operator's ceiling), the daily quota and pending limit with their use, and the "
            "provider's circuit (closed, open, probing)."
        ),
        summary="Sending limits: senders' rates, provider status",
    )
    def get(self, request):
        return Response(capacity.tenant_capacity_view(request.user.tenant))


class SenderCapacityApi(APIView):
    required_scopes = {"PUT": "capacity:write", "DELETE": "capacity:write"}

    @extend_schema(
        request=SenderRateInput,
        responses={200: CapacityOutput, 403: schema.FORBIDDEN},
        description=(
            "Caps the send rate of a sender the tenant owns alone, at most the operator's rate for it (else "
            "400). A shared sender, or another tenant's, is a 403. Answers the capacity view."
        ),
        parameters=[PROVIDER_PARAMETER],
        summary="Cap one of the tenant's senders (at most the operator's rate)",
    )
    def put(self, request, sender: str):
        strict_input.query_params_check(request.query_params, SENDER_PARAMS)
        _check_sender(sender)
        if not isinstance(request.data, dict):
            raise field_error("body", "must be a JSON object")
        data = SenderRateInput(data=request.data)
        data.is_valid(raise_exception=True)
        _set(request, sender, data.validated_data["segments_per_second"])
        return Response(capacity.tenant_capacity_view(request.user.tenant))

    # 200 with the capacity view, like PUT: the sender stays, at the default rate.
    @extend_schema(
        request=None,
        responses={200: CapacityOutput, 400: schema.BAD_PATH, 403: schema.FORBIDDEN},
        description=(
            "Removes the tenant's cap on the sender: it sends at the operator's rate again. Answers the "
            "capacity view."
        ),
        parameters=[PROVIDER_PARAMETER],
        summary="Remove the tenant's cap: back to the operator's rate",
    )
    def delete(self, request, sender: str):
        strict_input.query_params_check(request.query_params, SENDER_PARAMS)
        _check_sender(sender)
        _set(request, sender, None)
        return Response(capacity.tenant_capacity_view(request.user.tenant))


def _check_sender(sender: str) -> None:
    if not capacity.is_valid_sender(sender):
        raise field_error(
            "sender", "an E.164 number, a short code, an alphanumeric sender id or a messaging service sid"
        )


def _set(request, sender: str, rate: float | None) -> None:
    provider = request.query_params.get("provider")
    try:
        capacity.sender_capacity_set(
            tenant=request.user.tenant, sender=sender, segments_per_second=rate, provider=provider
        )
    except capacity.CapacityProviderUnknown:
        raise field_error(
            "provider", "not a provider this tenant sends through (see GET /v1/capacity)"
        ) from None
    except capacity.CapacityNotYours:
        # The same answer for another tenant's sender and for nobody's: no probing of others' senders.
        raise PermissionDenied(
            f"sender {sender} is not one this tenant owns alone: its rate is the operator's."
        ) from None
    except capacity.CapacityAboveCeiling as exc:
        raise field_error(
            "segments_per_second", f"at most {exc.ceiling:g}, the operator's rate for this sender"
        ) from None
