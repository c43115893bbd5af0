"""The tenant's pull API for replies (docs/inbound.md): ``GET /v1/inbound``, ``/v1/inbound/{id}`` and
``GET /v1/conversations/{to}``. One thin view per endpoint; inbound.selectors reads."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from inbound import selectors
from inbound.models import KeywordAction
from scheduling.models import Status
from smsgw.http import schema, strict_input
from smsgw.http.pagination import StrictCursorPagination
from smsgw.tenancy.scopes import scopes_grant

LIST_PARAMS = frozenset(("cursor", "page_size", "from", "to", "received_after", "received_before"))
CONVERSATION_PARAMS = frozenset(("cursor", "page_size", "from", "since"))
CONVERSATION_PAGE = 50
CONVERSATION_MAX_PAGE = 500

EXAMPLE = {
    "id": "in_5f0c2a9b1d3e4f5a6b7c8d9e",
    "from": "+14155552671",
    "to": "+14155550100",
    "sender_pool": "",
    "body": "C",
    "segments": 1,
    "keyword": "C",
    "action": "cancel",
    "action_result": {"cancelled": ["0f1e2d3c4b5a69788796a5b4"]},
    "needs_review": False,
    "in_reply_to": "a1b2c3d4e5f60718293a4b5c",
    "conversation": "+14155550100:+14155552671",
    "provider": "twilio",
    "parts_missing": [],
    "received_at": "2026-12-04T09:00:03.120000+00:00",
}


class InboundOutput(serializers.Serializer):
    id = serializers.CharField(source="public_id")
    from_ = serializers.CharField(source="from_number", help_text="Who wrote: the contact.")
    to = serializers.CharField(source="to_number", help_text="Our number it was sent to.")
    sender_pool = serializers.CharField(help_text="The pool (messaging service) of that number, if any.")
    body = serializers.CharField(help_text="Empty once the content horizon passed or it was erased.")
    segments = serializers.IntegerField()
    keyword = serializers.CharField(help_text="Its first word, upper case, accents removed.")
    action = serializers.ChoiceField(
        choices=KeywordAction.choices, allow_blank=True, help_text="The keyword's action, or ''."
    )
    action_result = serializers.DictField(help_text="What the action changed (ids, the reply sent).")
    needs_review = serializers.BooleanField(help_text="A near miss ('stop please'): not applied, for review.")
    in_reply_to = serializers.CharField(
        allow_null=True, help_text="The id of the last message sent on the same number pair before it."
    )
    conversation = serializers.CharField(help_text="The number pair: '<our number>:<contact>'.")
    provider = serializers.CharField()
    parts_missing = serializers.ListField(
        child=serializers.IntegerField(), help_text="Parts of a long message that never came (their numbers)."
    )
    received_at = serializers.DateTimeField()

    def get_fields(self):
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")
        return fields

    def to_representation(self, instance):
        data = super().to_representation(instance)
        data["in_reply_to"] = data["in_reply_to"] or None
        return data


class InboundCursor(StrictCursorPagination):
    ordering = "-id"


class InboundListApi(APIView):
    required_scopes = {"GET": "inbound:read"}

    @extend_schema(
        parameters=[
            *schema.PAGE_PARAMETERS,
            OpenApiParameter(
                "from", str, description="The contact's number (E.164). Else 400 naming `from`."
            ),
            OpenApiParameter("to", str, description="Our number it was sent to (E.164)."),
            OpenApiParameter("received_after", str, description="ISO 8601 instant, inclusive."),
            OpenApiParameter("received_before", str, description="ISO 8601 instant, exclusive."),
        ],
        responses=schema.paginated(InboundOutput, "InboundPage"),
        description=(
            "Replies and other messages sent to the tenant's numbers, newest first, with the keyword found "
            "and what its action did. Filter by the contact (`from`), our number (`to`) and when received."
        ),
        summary="Messages received from recipients (newest first, cursor pages)",
        examples=[
            OpenApiExample(
                "A reply", value={"next": None, "previous": None, "results": [EXAMPLE]}, response_only=True
            )
        ],
    )
    def get(self, request):
        strict_input.query_params_check(request.query_params, LIST_PARAMS)
        qs = selectors.inbound_list(tenant=request.user.tenant, params=request.query_params)
        paginator = InboundCursor()
        page = paginator.paginate_queryset(qs, request, view=self)
        assert page is not None
        return paginator.get_paginated_response(InboundOutput(page, many=True).data)


class InboundDetailApi(APIView):
    required_scopes = {"GET": "inbound:read"}

    @extend_schema(
        responses=InboundOutput,
        description=(
            "One received message: who wrote, to which of the tenant's numbers, its body, keyword and action,"
            " and the message it answers (`in_reply_to`)."
        ),
        summary="One received message",
        examples=[OpenApiExample("A reply", value=EXAMPLE, response_only=True)],
    )
    def get(self, request, public_id: str):
        strict_input.query_params_check(request.query_params, frozenset())
        found = selectors.inbound_get(tenant=request.user.tenant, public_id=public_id)
        return Response(InboundOutput(found).data)


# An outbound message's status, or "received" (inbound.selectors.conversation_page).
CONVERSATION_STATUSES = [*Status.values, "received"]


class ConversationItem(serializers.Serializer):
    direction = serializers.ChoiceField(choices=["outbound", "inbound"])
    id = serializers.CharField(source="public_id")
    from_ = serializers.CharField(source="from_number")
    to = serializers.CharField(source="to_number")
    body = serializers.CharField()
    status = serializers.ChoiceField(
        choices=CONVERSATION_STATUSES,
        help_text="An outbound message's status; 'received' for an inbound one.",
    )
    at = serializers.DateTimeField(
        help_text="Sent (or due, if not yet sent) for outbound; received for inbound."
    )

    def get_fields(self):
        fields = super().get_fields()
        fields["from"] = fields.pop("from_")
        return fields


class ConversationApi(APIView):
    required_scopes = {"GET": "inbound:read"}

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "cursor", str, description="Opaque: the `next` URL of a page carries it. Else 400."
            ),
            OpenApiParameter("page_size", int, description="1-500, default 50. Else 400 naming `page_size`."),
            OpenApiParameter("from", str, description="One of our numbers (or pools): that pair only."),
            OpenApiParameter("since", str, description="ISO 8601 instant: start there."),
        ],
        responses=inline_serializer(
            "ConversationPage",
            {
                "next": serializers.URLField(
                    allow_null=True, help_text="The next page's URL; null on the last."
                ),
                "results": ConversationItem(many=True),
            },
        ),
        summary="One contact's conversation: outbound and inbound messages in order (oldest first)",
        description=(
            "The messages sent to the contact and the replies received from it, oldest first. The outbound "
            "ones are listed only for a key that also holds `messages:read`."
        ),
        examples=[
            OpenApiExample(
                "A reminder and its reply",
                value={
                    "next": None,
                    "results": [
                        {
                            "direction": "outbound",
                            "id": "a1b2c3d4e5f60718293a4b5c",
                            "from": "+14155550100",
                            "to": "+14155552671",
                            "body": "Your appointment is on Tuesday at 9:00. Reply C to cancel.",
                            "status": "delivered",
                            "at": "2026-12-04T08:00:00+00:00",
                        },
                        {
                            "direction": "inbound",
                            "id": "in_5f0c2a9b1d3e4f5a6b7c8d9e",
                            "from": "+14155552671",
                            "to": "+14155550100",
                            "body": "C",
                            "status": "received",
                            "at": "2026-12-04T09:00:03.120000+00:00",
                        },
                    ],
                },
                response_only=True,
            )
        ],
    )
    def get(self, request, to: str):
        params = request.query_params
        strict_input.query_params_check(params, CONVERSATION_PARAMS)
        size = InboundCursor().get_page_size(request)
        # The pair's outbound messages only for a key that may read messages: inbound:read alone is not
        # a way around messages:read.
        outbound = scopes_grant(request.user.api_key.scopes, "messages:read")
        items, cursor = selectors.conversation_page(
            tenant=request.user.tenant, contact_raw=to, params=params, size=size, outbound=outbound
        )
        next_url = None
        if cursor is not None:
            query = params.copy()
            query["cursor"] = cursor
            next_url = request.build_absolute_uri(request.path) + "?" + query.urlencode()
        return Response({"next": next_url, "results": ConversationItem(items, many=True).data})
