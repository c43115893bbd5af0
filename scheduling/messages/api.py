"""Tenant API for messages (docs/api.md). One thin view per endpoint; rules live in services/selectors."""

from __future__ import annotations

import json
from typing import cast

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import serializers, status
from rest_framework.pagination import Cursor
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduling.facade.names import SENDER_POOL_FIELD, SENDER_POOL_MAX_LENGTH
from scheduling.messages import batch, edits, examples, selectors
from scheduling.messages import service as services
from scheduling.messages.outputs import EventOutput, MessageOutput, message_data
from scheduling.models import Priority, Status
from smsgw.config.providers import body_max_length
from smsgw.http import schema, strict_input
from smsgw.http.errors import error_answer, field_error
from smsgw.http.pagination import StrictCursorPagination

MAX_METADATA_BYTES = 4096


def _metadata(value):
    if len(json.dumps(value)) > MAX_METADATA_BYTES:
        raise serializers.ValidationError(f"must serialise to at most {MAX_METADATA_BYTES} bytes of JSON")
    return value


class StrictSerializer(strict_input.JsonTypedSerializer):
    """Unknown keys are an error: a typo such as `sendAt` must not silently send now."""

    def run_validation(self, data=serializers.empty):
        if data is not serializers.empty and not isinstance(data, dict):
            # null, [] or "x" as a body: name the body, not "non_field_errors"
            raise serializers.ValidationError({"body": ["must be a JSON object"]})
        return super().run_validation(data)

    def to_internal_value(self, data):
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({k: ["unknown field"] for k in unknown})
        return super().to_internal_value(data)


# The longest wait before an uncertain submission is resent (delivery.sending.reconcile, list-lag bound).
UNCERTAIN_WAIT_MAX = int(
    settings.PROVIDER_REQUEST_TIMEOUT_SECONDS
    + settings.RECONCILE_ABSENT_GRACE_SECONDS
    + settings.RECONCILE_LIST_LAG_SECONDS
)
_message_fields: dict[str, serializers.Field] = {
    "to": serializers.CharField(max_length=32, help_text="Recipient in E.164, e.g. +14155550100."),
    "body": serializers.CharField(max_length=body_max_length(), trim_whitespace=False),
    "from": serializers.CharField(
        max_length=32, required=False, help_text="E.164 number or alphanumeric id."
    ),
    SENDER_POOL_FIELD: serializers.CharField(max_length=SENDER_POOL_MAX_LENGTH, required=False),
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
    "uncertain_wait_seconds": serializers.IntegerField(
        min_value=settings.RECONCILE_MIN_WAIT_SECONDS,
        max_value=UNCERTAIN_WAIT_MAX,
        required=False,
        allow_null=True,
        help_text=(
            "If the provider's answer to a submission is lost, how long (from the attempt) before it may be "
            "sent again when the provider's list still does not show it. Default (null): the gateway's bound "
            f"({UNCERTAIN_WAIT_MAX} s), which never sends twice while the list lags up to "
            f"{settings.RECONCILE_LIST_LAG_SECONDS} s. Shorter (for one-time codes, where late is worse "
            f"than a rare duplicate): at least {settings.RECONCILE_MIN_WAIT_SECONDS} s. "
            'docs/architecture.md, "Uncertain submissions".'
        ),
    ),
    "quiet_hours": serializers.JSONField(
        required=False,
        help_text='Quiet-hours override: {"start": "21:00", "end": "08:00"} or {"enabled": false}.',
    ),
    "recipient_timezone": serializers.CharField(
        max_length=64, required=False, help_text="IANA zone the quiet window is evaluated in."
    ),
}
# Built with type() because "from" is a keyword and cannot be written as a class attribute. DRF keeps a
# field's constructor arguments in its private _kwargs (Field.__new__), which the stubs leave out.
MessageCreateInput = cast(
    "type[StrictSerializer]", type("MessageCreateInput", (StrictSerializer,), dict(_message_fields))
)


def _fresh(f: serializers.Field, **changes) -> serializers.Field:
    """A new field made as ``f`` was, with ``changes``: a declared field belongs to one serializer."""
    return type(f)(**{**f._kwargs, **changes})  # type: ignore[attr-defined]


MessageUpdateInput = cast(
    "type[StrictSerializer]",
    type(
        "MessageUpdateInput",
        (StrictSerializer,),
        {k: _fresh(f, required=False) for k, f in _message_fields.items()},
    ),
)


# message_create_input's shortcut holds for these field types and this serializer as written: a field of
# another type, a validate()/validate_<field> method or serializer validators turn it off, and every request
# then goes through the serializer. (It relies on StrictSerializer's unknown-key rule, repeated below.)
_FAST_INPUT = (
    all(
        type(f)
        in (
            serializers.CharField,
            serializers.ChoiceField,
            serializers.IntegerField,
            serializers.DictField,
            serializers.JSONField,
        )
        for f in _message_fields.values()
    )
    and MessageCreateInput.validate is serializers.Serializer.validate
    and MessageCreateInput.to_internal_value is StrictSerializer.to_internal_value
    and not any(hasattr(MessageCreateInput, f"validate_{name}") for name in _message_fields)
    and not getattr(getattr(MessageCreateInput, "Meta", None), "validators", None)
)


def message_create_input(data, serializer: StrictSerializer | None = None) -> dict:
    """``MessageCreateInput(data=data)``'s validated_data, or its ValidationError.

    A valid request (nearly every request) is validated field by field with the declared fields' own
    ``run_validation`` (the same conversion and validators the serializer runs), without building a
    serializer, which deep-copies every declared field per request. Anything else, including every
    invalid request, goes through the serializer itself, so errors are exactly the serializer's.
    ``serializer``: a ``MessageCreateInput()`` to validate with, reused across a batch's items as DRF's
    ListSerializer reuses its child (building one per invalid item was two thirds of its cost)."""
    if (
        _FAST_INPUT
        and type(data) is dict
        and data.keys() <= _message_fields.keys()
        and not strict_input.json_type_errors(_message_fields, data)
    ):
        validated = {}
        try:
            for name, field in _message_fields.items():
                if name in data:
                    validated[name] = field.run_validation(data[name])
                elif field.required:
                    break
            else:
                return validated
        except (serializers.ValidationError, DjangoValidationError):
            pass
    if serializer is not None:
        return serializer.run_validation(data)
    single = MessageCreateInput(data=data)
    single.is_valid(raise_exception=True)
    return single.validated_data


class MessageCursor(StrictCursorPagination):
    """Newest first over the live table and history together (selectors.message_page): the same cursors
    as every list (``p`` an id, ``r`` for a previous page), made here because the page is a merge of two
    sources, not one queryset."""

    ordering = "-id"

    def merged_response(self, request, *, qs, tenant, lookups, render):
        self.request = request
        self.base_url = request.build_absolute_uri()
        size = self.get_page_size(request)
        cursor = self.decode_cursor(request)
        position = int(cursor.position) if cursor and cursor.position is not None else None
        backwards = bool(cursor and cursor.reverse and position is not None)
        rows = selectors.message_page(
            qs=qs,
            tenant=tenant,
            lookups=lookups,
            before=None if backwards else position,
            after=position if backwards else None,
            limit=size + 1,
        )
        if backwards:
            more_before, rows = len(rows) > size, rows[-size:] if len(rows) > size else rows
            more_after = True
        else:
            more_after, rows = len(rows) > size, rows[:size]
            more_before = position is not None
        nxt = prev = None
        if rows and more_after:
            nxt = self.encode_cursor(Cursor(offset=0, reverse=False, position=str(rows[-1].pk)))  # type: ignore[arg-type]
        if rows and more_before:
            prev = self.encode_cursor(Cursor(offset=0, reverse=True, position=str(rows[0].pk)))  # type: ignore[arg-type]
        return Response({"next": nxt, "previous": prev, "results": [render(m) for m in rows]})


def _actor(request) -> str:
    return str(request.user)


def _idempotency_key(key, field: str = "Idempotency-Key") -> str | None:
    """An idempotency key as given (the header, or a batch item's ``idempotency_key``), stripped."""
    if key is None:
        return None
    if not isinstance(key, str) or not key.strip() or len(key) > 255:
        raise field_error(field, "must be 1-255 characters")
    return key.strip()


LIST_PARAMS = frozenset(
    (
        "status",
        "reason_code",
        "to",
        "created_after",
        "created_before",
        "due_after",
        "due_before",
        "cursor",
        "page_size",
    )
)


class MessageEventsOutput(serializers.Serializer):
    message = serializers.CharField(help_text="The message's id.")
    status = serializers.ChoiceField(choices=Status.choices, help_text="Its current status.")
    events = EventOutput(many=True)


class MessagesApi(APIView):
    required_scopes = {"GET": "messages:read", "POST": "messages:send"}

    @extend_schema(
        request=MessageCreateInput,
        responses={
            201: MessageOutput,
            200: OpenApiResponse(MessageOutput, description="A replay of an earlier Idempotency-Key."),
            422: schema.IDEMPOTENCY_MISMATCH,
            429: schema.QUOTA_OR_RATE_LIMITED,
        },
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="1-255 characters. A repeat with the same body returns the original (200, "
                "`Idempotent-Replayed: true`); with a different body, 422.",
            ),
            schema.location(200, 201, what="message"),
            schema.idempotent_replayed(200),
        ],
        examples=[examples.SEND_NOW, examples.SEND_AT_LOCAL_TIME, examples.SEND_AT_INSTANT],
        description=(
            "Accepts one SMS and answers 201 with the message, `scheduled` until it is due, then `queued`, "
            "`sending`, `sent` and `delivered` (or `failed`, `undelivered`, `expired`). Without `send_at` "
            "it is due at once; with an offset (or `Z`) `send_at` is that instant, without one a wall time "
            "in `timezone` (a repeated or skipped local time resolved by `dst_policy`). "
            "Quiet hours (the tenant's, or `quiet_hours` here) may move it later; `expected_send_at` says "
            "when. Send an `Idempotency-Key` to make a retry safe: the same key and body answer 200 with the "
            "original and `Idempotent-Replayed: true`."
        ),
        summary="Send a message now or at a time",
    )
    def post(self, request):
        key = _idempotency_key(request.headers.get("Idempotency-Key"))
        data = message_create_input(request.data)
        message, created = services.message_create(
            tenant=request.user.tenant, actor=_actor(request), data=data, idempotency_key=key
        )
        headers = {"Location": f"/v1/messages/{message.public_id}"}
        if not created:
            headers["Idempotent-Replayed"] = "true"
        return Response(message_data(message), status=201 if created else 200, headers=headers)

    @extend_schema(
        responses=schema.paginated(MessageOutput, "MessagePage"),
        parameters=[
            OpenApiParameter(
                "status",
                str,
                description="Comma-separated statuses.",
                examples=[OpenApiExample("Scheduled or queued", value="scheduled,queued")],
            ),
            OpenApiParameter(
                "reason_code",
                str,
                description="Comma-separated machine-readable reasons (the `reason_code` field), e.g. "
                "`held_for_review` for messages the velocity guard holds for an operator's review.",
                examples=[OpenApiExample("Held for review", value="held_for_review")],
            ),
            OpenApiParameter(
                "to",
                str,
                description="Recipient, normalised like the `to` field (E.164; a leading space from an "
                "unencoded `+` is read as `+`). A number that cannot be one is a 400 naming `to`.",
                examples=[OpenApiExample("One recipient", value="+14155550123")],
            ),
            OpenApiParameter("created_after", str, description="ISO 8601 instant."),
            OpenApiParameter("created_before", str, description="ISO 8601 instant."),
            OpenApiParameter(
                "due_after",
                str,
                description="ISO 8601 instant.",
                examples=[OpenApiExample("Due from", value="2026-12-24T00:00:00Z")],
            ),
            OpenApiParameter("due_before", str, description="ISO 8601 instant."),
            *schema.PAGE_PARAMETERS,
        ],
        description=(
            "The tenant's messages, newest first, live and archived alike, filtered by status, reason code, "
            "recipient and creation or due time. Follow `next` for the following page; a page's cursor stays "
            "valid while messages are added."
        ),
        summary="List messages (newest first, cursor pages)",
    )
    def get(self, request):
        strict_input.query_params_check(request.query_params, LIST_PARAMS)
        tenant = request.user.tenant
        lookups = selectors.message_lookups(request.query_params)
        qs = selectors.message_list(tenant=tenant, params=request.query_params)
        paginator = MessageCursor()
        return paginator.merged_response(request, qs=qs, tenant=tenant, lookups=lookups, render=message_data)


MessageBatchItemInput = cast(
    "type[StrictSerializer]",
    type(
        "MessageBatchItemInput",
        (StrictSerializer,),
        {
            **{k: _fresh(f) for k, f in _message_fields.items()},
            "idempotency_key": serializers.CharField(
                max_length=255,
                required=False,
                help_text="1-255 characters: this item's `Idempotency-Key`. A repeat (in a later batch, in "
                "this one, or as the header of a single `POST /v1/messages`) with the same fields is the "
                "same message (status 200); with other fields, 422.",
            ),
        },
    ),
)


class MessageBatchInput(StrictSerializer):
    messages = serializers.ListField(
        child=MessageBatchItemInput(),
        min_length=1,
        max_length=settings.BATCH_MAX_MESSAGES,
        help_text=f"1 to {settings.BATCH_MAX_MESSAGES} messages (SMSGW_BATCH_MAX_MESSAGES), each what "
        "`POST /v1/messages` takes, plus its own optional `idempotency_key`.",
    )


class MessageBatchResult(serializers.Serializer):
    index = serializers.IntegerField(help_text="The item's position in `messages`, from 0.")
    status = serializers.IntegerField(
        help_text="What a single `POST /v1/messages` would have answered: 201 created, 200 a replay of its "
        "`idempotency_key`, 400 invalid (the fields named relative to the item), 422 a key reused with "
        "other fields, 429 over a quota."
    )
    message = MessageOutput(required=False, help_text="The message (201 and 200).")
    error = schema.ErrorDetail(required=False, help_text="Why the item was refused (4xx); nothing stored.")
    problem = schema.ItemProblem(
        required=False,
        help_text="The same refusal as problem details (RFC 9457, docs/errors.md), as a single request "
        "would have answered it: `errors` gives each field's own code. Its `status` is the item's; the "
        "envelope is the item's `error`, and the response's `Request-Id` covers every item.",
    )


class MessageBatchOutput(serializers.Serializer):
    created = serializers.IntegerField()
    replayed = serializers.IntegerField()
    refused = serializers.IntegerField()
    results = MessageBatchResult(many=True)


BATCH_KEYS = frozenset({"messages"})


def _batch_items(data) -> list[batch.Item]:
    """The request's items, each validated as ``POST /v1/messages`` validates a body. What makes the
    whole request unusable (not an object, no list, too many items) is a 400 for the request."""
    if not isinstance(data, dict):
        raise field_error("body", "must be a JSON object")
    unknown = sorted(set(data) - BATCH_KEYS)
    if unknown:
        raise serializers.ValidationError({k: ["unknown field"] for k in unknown})
    raw = data.get("messages")
    limit = settings.BATCH_MAX_MESSAGES
    if not isinstance(raw, list) or not 1 <= len(raw) <= limit:
        raise field_error("messages", f"must be a list of 1 to {limit} message objects")
    items = []
    item_input = MessageCreateInput()
    for value in raw:
        if not isinstance(value, dict):
            items.append(batch.Item(None, error=field_error("item", "must be a JSON object")))
            continue
        fields = dict(value)
        try:
            key = _idempotency_key(fields.pop("idempotency_key", None), "idempotency_key")
            items.append(batch.Item(message_create_input(fields, item_input), key))
        except serializers.ValidationError as exc:
            items.append(batch.Item(None, error=exc))
    return items


class MessagesBatchApi(APIView):
    required_scopes = {"POST": "messages:send"}

    @extend_schema(
        request=MessageBatchInput,
        responses={200: MessageBatchOutput},
        examples=[examples.BATCH],
        description=(
            "Up to SMSGW_BATCH_MAX_MESSAGES messages, each validated and stored on its own: the answer is 200"
            " with one result per item, in order, whose `status` is what `POST /v1/messages` would have "
            "answered (201, 200 for a replayed `idempotency_key`, 400, 422, 429). An item refused changes "
            "nothing for the others. Only a request that is unusable as a whole (not a list, too many items) "
            "is a 400."
        ),
        summary="Send many messages in one request, each with its own answer",
    )
    def post(self, request):
        items = _batch_items(request.data)
        outcomes = batch.messages_create_batch(tenant=request.user.tenant, actor=_actor(request), items=items)
        results: list[dict] = []
        counts = {"created": 0, "replayed": 0, "refused": 0}
        for index, outcome in enumerate(outcomes):
            if outcome.message is not None:
                code = 201 if outcome.created else 200
                counts["created" if outcome.created else "replayed"] += 1
                results.append({"index": index, "status": code, "message": message_data(outcome.message)})
            else:
                assert outcome.error is not None
                code, body = error_answer(outcome.error)
                counts["refused"] += 1
                envelope = body.pop("error")
                results.append({"index": index, "status": code, "error": envelope, "problem": body})
        return Response({**counts, "results": results})


class MessageDetailApi(APIView):
    required_scopes = {"GET": "messages:read", "PATCH": "messages:write"}

    @extend_schema(
        responses=MessageOutput,
        description=(
            "The message with its status, `reason_code` (why it waits or why it ended unsent), route, "
            "timestamps of each stage and provider fields. Messages moved to history by the retention job are"
            " still found."
        ),
        summary="Get one message",
    )
    def get(self, request, public_id: str):
        return Response(message_data(selectors.message_read(tenant=request.user.tenant, public_id=public_id)))

    @extend_schema(
        request=MessageUpdateInput,
        responses={200: MessageOutput, 409: schema.CONFLICT, 429: schema.QUOTA_OR_RATE_LIMITED},
        examples=[examples.RESCHEDULE],
        description=(
            "Changes a message that is still `scheduled`: its `send_at`/`timezone` (rescheduled), body, "
            "recipient or other fields, as `POST /v1/messages` reads them. Once it is `queued` or later it is"
            " on its way: 409 with its `status`, nothing changed. Each change is a timeline entry (`edited`, "
            "`rescheduled`)."
        ),
        summary="Reschedule or edit a scheduled message (409 once queued or later)",
    )
    def patch(self, request, public_id: str):
        data = MessageUpdateInput(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        message = edits.message_update(
            tenant=request.user.tenant, public_id=public_id, actor=_actor(request), data=data.validated_data
        )
        return Response(message_data(message))


class MessageCancelApi(APIView):
    required_scopes = {"POST": "messages:cancel"}

    @extend_schema(
        request=None,
        responses={200: MessageOutput, 409: schema.CONFLICT},
        description=(
            "Cancels a message that is `scheduled` or `queued`: it becomes `cancelled` (`reason_code` "
            "`cancelled_by_request`) and is never sent. A repeat answers the same 200. Once `sending` or "
            "later it may already be with the provider: 409 with its `status`, nothing changed."
        ),
        summary="Cancel (scheduled or queued only; 409 with the real stage otherwise)",
    )
    def post(self, request, public_id: str):
        message = services.message_cancel(
            tenant=request.user.tenant, public_id=public_id, actor=_actor(request)
        )
        return Response(message_data(message), status=status.HTTP_200_OK)


class MessageEventsApi(APIView):
    required_scopes = {"GET": "messages:read"}

    @extend_schema(
        responses=MessageEventsOutput,
        description=(
            "Every entry of the message's timeline (`kind`: created, queued, attempt_started, sent, "
            "delivered, retry_scheduled, cancelled, ...), with the status it moved from and to, who acted and"
            " the details."
        ),
        summary="The message's timeline, oldest first",
    )
    def get(self, request, public_id: str):
        message = selectors.message_read(tenant=request.user.tenant, public_id=public_id)
        events = selectors.message_events(message=message)
        return Response(
            {
                "message": message.public_id,
                "status": message.status,
                "events": EventOutput(events, many=True).data,
            }
        )


__all__ = [
    "MessageCancelApi",
    "MessageDetailApi",
    "MessageEventsApi",
    "MessagesApi",
    "MessagesBatchApi",
    "Status",
]
