"""The tenant's suppression list: `GET|POST|DELETE /v1/suppressions` (delivery.guards.suppression does the
work and the auditing; source `api`). The recipient is `to`, as everywhere in the API; `number` is its
deprecated alias, still read in the body and the query and still written beside `to` in answers."""

from __future__ import annotations

from collections.abc import Mapping

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from delivery.flow import capacity
from delivery.guards import suppression
from delivery.models import Suppression, SuppressionSource
from smsgw.channels import DEFAULT_CHANNEL, AddressError
from smsgw.http import schema, strict_input
from smsgw.http.deprecation import deprecation_headers, header_parameters
from smsgw.http.errors import field_error
from smsgw.http.pagination import StrictCursorPagination
from smsgw.http.strict_input import ClosedJsonSerializer

SENDER_HELP = (
    "The From number or messaging service SID the recipient opted out of; empty or absent: every sender "
    "of the tenant."
)


DEPRECATED_ALIAS = "Deprecated alias of `to`"
ALIAS = "number"


@extend_schema_serializer(deprecate_fields=[ALIAS])
class SuppressionOutput(serializers.Serializer):
    to = serializers.CharField(help_text="The recipient (E.164).")
    number = serializers.CharField(help_text=f"{DEPRECATED_ALIAS}: the same value.")
    sender = serializers.CharField(help_text=SENDER_HELP)
    # The serializer's metaclass pops declared fields off the class, so this never shadows Field.source;
    # the stubs cannot know that (rest_framework/serializers.py, SerializerMetaclass._get_declared_fields).
    source = serializers.ChoiceField(choices=SuppressionSource.choices)  # type: ignore[assignment]
    created_at = serializers.DateTimeField()


@extend_schema_serializer(
    deprecate_fields=[ALIAS], description="`to` is required (or `number`, its deprecated alias)."
)
class SuppressionInput(ClosedJsonSerializer):
    to = serializers.CharField(max_length=32, required=False, help_text="The recipient (E.164). Required.")
    number = serializers.CharField(
        max_length=32, required=False, help_text=f"{DEPRECATED_ALIAS}: give one of them (or both, equal)."
    )
    sender = serializers.CharField(max_length=64, required=False, allow_blank=True, help_text=SENDER_HELP)


class SuppressionCursor(StrictCursorPagination):
    ordering = "-id"


LIST_PARAMS = frozenset(("to", ALIAS, "sender", "cursor", "page_size"))
DELETE_PARAMS = frozenset(("to", ALIAS, "sender"))


def _number(raw: str, field: str) -> str:
    try:
        return DEFAULT_CHANNEL.address(raw)
    except AddressError as exc:
        raise field_error(field, str(exc)) from exc


def _recipient(values: Mapping) -> str | None:
    """The E.164 number of ``to`` or of its deprecated alias ``number`` (None when neither is given); a
    bad value is a 400 naming the one the client wrote, both naming different numbers a 400 naming the
    alias."""
    given = [(name, values[name]) for name in ("to", ALIAS) if values.get(name) is not None]
    numbers = [_number(raw, name) for name, raw in given]
    if len(set(numbers)) > 1:
        raise field_error(
            ALIAS, "a different number than `to`: give `to` alone (`number` is its deprecated alias)"
        )
    return numbers[0] if numbers else None


def _aliases(values: Mapping) -> list[str]:
    """The deprecated name the request used, for the answer's Deprecation headers."""
    return [ALIAS] if ALIAS in values else []


def _sender(raw: str) -> str:
    raw = (raw or "").strip()
    if raw and not capacity.is_valid_sender(raw):
        raise field_error(
            "sender", "an E.164 number, a short code, an alphanumeric sender id or a messaging service sid"
        )
    return raw


def _data(entry: Suppression) -> dict:
    return {
        "to": entry.number,
        "number": entry.number,
        "sender": entry.sender,
        "source": entry.source,
        "created_at": entry.created_at,
    }


class SuppressionsApi(APIView):
    required_scopes = {
        "GET": "suppressions:read",
        "POST": "suppressions:write",
        "DELETE": "suppressions:write",
    }

    @extend_schema(
        parameters=[
            OpenApiParameter("to", str, description="Only this recipient (E.164). Else 400."),
            OpenApiParameter(
                ALIAS, str, deprecated=True, description=f"{DEPRECATED_ALIAS}: the same filter."
            ),
            OpenApiParameter("sender", str, description="Only entries for this sender."),
            *schema.PAGE_PARAMETERS,
            *header_parameters([200]),
        ],
        responses=schema.paginated(SuppressionOutput, "SuppressionPage"),
        description=(
            "Numbers the tenant does not send to, newest first: opt-outs from replies (STOP) and entries the "
            "tenant added, each for every sender or one. Filter by `to` and `sender`."
        ),
        summary="The suppression list (newest first, cursor pages)",
    )
    def get(self, request):
        strict_input.query_params_check(request.query_params, LIST_PARAMS)
        qs = Suppression.objects.filter(tenant=request.user.tenant)
        number = _recipient(request.query_params)
        if number is not None:
            qs = qs.filter(number=number)
        if "sender" in request.query_params:
            qs = qs.filter(sender=_sender(request.query_params["sender"]))
        paginator = SuppressionCursor()
        page = paginator.paginate_queryset(qs, request, view=self)
        assert page is not None  # None only without a page size; StrictCursorPagination always has one
        response = paginator.get_paginated_response([_data(e) for e in page])
        return deprecation_headers(response, _aliases(request.query_params))

    @extend_schema(
        request=SuppressionInput,
        responses={201: SuppressionOutput, 200: SuppressionOutput},
        examples=[
            OpenApiExample("Every sender", value={"to": "+14155550123"}, request_only=True),
        ],
        parameters=header_parameters([200, 201]),
        description=(
            "Adds a number to the suppression list, for every sender or one `sender`: messages to it are "
            "refused (`reason_code` `opted_out`). 201 when added; 200 when it was already there. `number` is "
            "a deprecated alias of `to` (`Deprecation`, `Sunset` and `Link` headers)."
        ),
        summary="Add a number (201; 200 if it was already there)",
    )
    def post(self, request):
        if not isinstance(request.data, dict):
            raise field_error("body", "must be a JSON object")
        data = SuppressionInput(data=request.data)
        data.is_valid(raise_exception=True)
        number = _recipient(data.validated_data)
        if number is None:
            raise field_error("to", "required")
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
        return deprecation_headers(
            Response(_data(entry), status=201 if added else 200), _aliases(request.data)
        )

    @extend_schema(
        request=None,
        parameters=[
            OpenApiParameter("to", str, description="The recipient (E.164). Required (or `number`)."),
            OpenApiParameter(
                ALIAS, str, deprecated=True, description=f"{DEPRECATED_ALIAS}: the same recipient."
            ),
            OpenApiParameter(
                "sender", str, description="The entry's sender; absent: the every-sender entry."
            ),
            *header_parameters([204]),
        ],
        responses={204: None, 404: schema.NOT_FOUND},
        description=(
            "Removes the entry for exactly this number and sender (none: the entry for every sender). 204; "
            "404 when there is no such entry. `number` is a deprecated alias of `to`."
        ),
        summary="Remove a number (the entry for exactly this sender)",
    )
    def delete(self, request):
        strict_input.query_params_check(request.query_params, DELETE_PARAMS)
        number = _recipient(request.query_params)
        if number is None:
            raise field_error("to", "required")
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
        return deprecation_headers(Response(status=204), _aliases(request.query_params))
