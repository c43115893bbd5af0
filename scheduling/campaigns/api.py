"""Tenant API for campaigns (docs/campaigns.md): create (JSON or a CSV upload) and the reads. One thin
view per endpoint; the rules live in ``scheduling.campaigns.service`` (writes) and
``scheduling.campaigns.selectors``.
Pause, resume and cancel are served next to these by their own module."""

from __future__ import annotations

import json

from django.core.files.uploadhandler import TemporaryFileUploadHandler
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import serializers
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduling.campaigns import selectors
from scheduling.campaigns import service as services
from scheduling.campaigns.progress import progress_read, progress_read_many
from scheduling.facade.names import SENDER_POOL_FIELD, SENDER_POOL_MAX_LENGTH
from scheduling.facade.outputs import PublicNames
from scheduling.messages.api import (
    MessageOutput,
    StrictSerializer,
    _actor,
    _idempotency_key,
    _metadata,
    message_data,
)
from scheduling.models import Campaign, CampaignStatus, CampaignTimeMode, Priority
from smsgw.config.providers import body_max_length
from smsgw.http import schema, strict_input
from smsgw.http.boundary import (
    MAX_JSON_DEPTH,
    NUL_OR_SURROGATE,
    StrictJSONParser,
    first_bad_field,
    json_problem,
)
from smsgw.http.deprecation import deprecation_headers, header_parameters
from smsgw.http.errors import field_error
from smsgw.http.pagination import StrictCursorPagination
from smsgw.values.actors import reason_for_tenant
from smsgw.values.digits import is_ascii_digits

# A recipient's values as the service takes them (scheduling.campaigns.service._source_columns).
_RECIPIENT_VALUE = {"type": ["string", "number", "null"]}
DEPRECATED_ALIAS = "Deprecated alias of `to`"


@extend_schema_field(
    {
        "type": "object",
        "properties": {
            "to": {**_RECIPIENT_VALUE, "description": "The recipient: an E.164 number."},
            "phone": {
                **_RECIPIENT_VALUE,
                "deprecated": True,
                "description": f"{DEPRECATED_ALIAS}: still read. With `to` too, the same value or a 400.",
            },
            "timezone": {
                **_RECIPIENT_VALUE,
                "description": "The recipient's IANA zone (time_mode recipient_local, quiet hours).",
            },
        },
        "additionalProperties": {**_RECIPIENT_VALUE, "description": "A template variable's value."},
    }
)
class RecipientField(serializers.DictField):
    """One recipient object: ``to``, an optional ``timezone``, its variables (checked by the service)."""


def _campaign_fields() -> dict:
    return {
        "name": serializers.CharField(max_length=200, required=False),
        "body": serializers.CharField(
            max_length=body_max_length(),
            trim_whitespace=False,
            required=False,
            help_text="One body for everyone.",
        ),
        "template": serializers.CharField(
            max_length=body_max_length(),
            trim_whitespace=False,
            required=False,
            help_text="Instead of body: text with {variable} placeholders filled per recipient "
            "({{ and }} write literal braces), e.g. 'Hello {first_name}'.",
        ),
        "from": serializers.CharField(max_length=32, required=False, help_text="E.164 number or sender id."),
        SENDER_POOL_FIELD: serializers.CharField(max_length=SENDER_POOL_MAX_LENGTH, required=False),
        "priority": serializers.ChoiceField(
            choices=Priority.choices, required=False, help_text="Default bulk."
        ),
        "validity_seconds": serializers.IntegerField(min_value=60, max_value=7 * 86400, required=False),
        "send_at": serializers.CharField(
            max_length=64,
            required=False,
            help_text="ISO 8601. With an offset: that instant; without: a local wall time in `timezone`, or "
            "in each recipient's zone with time_mode recipient_local. Absent: now.",
        ),
        "timezone": serializers.CharField(
            max_length=64,
            required=False,
            help_text="IANA zone of a local send_at; for recipient_local the default zone of recipients "
            "whose zone is not known. Default: the tenant's.",
        ),
        "time_mode": serializers.ChoiceField(
            choices=CampaignTimeMode.choices,
            required=False,
            help_text="Derived from send_at unless recipient_local is asked for.",
        ),
        "dst_policy": serializers.ChoiceField(choices=["earlier", "later"], required=False),
        "quiet_hours": serializers.JSONField(
            required=False, help_text='{"start": "21:00", "end": "08:00"} or {"enabled": false}.'
        ),
        "metadata": serializers.DictField(required=False, validators=[_metadata]),
        "allow_duplicates": serializers.BooleanField(
            required=False, help_text="Send to a number once per row it appears on (default: once)."
        ),
    }


CampaignCreateInput = type(
    "CampaignCreateInput",
    (StrictSerializer,),
    {
        **_campaign_fields(),
        "recipients": serializers.ListField(
            child=RecipientField(),
            help_text="Objects {to, timezone?, <variable>: value, ...}; other keys are variables. "
            "`phone` is a deprecated alias of `to`.",
        ),
    },
)
CampaignUploadInput = type(
    "CampaignUploadInput",
    (StrictSerializer,),
    {
        **_campaign_fields(),
        "recipients": serializers.FileField(
            help_text="CSV, UTF-8, header row first: to, optional timezone, one column per variable. "
            "A `phone` column is a deprecated alias of `to` (a header with both is a 400)."
        ),
    },
)
# A form carries text: these are read as the JSON body would carry them.
_FORM_INTEGERS = ("validity_seconds",)
_FORM_BOOLEANS = ("allow_duplicates",)
_FORM_OBJECTS = ("quiet_hours", "metadata")


class CreationOutput(serializers.Serializer):
    recipients_read = serializers.IntegerField(source="recipients_total", help_text="Rows read so far.")
    lines_read = serializers.IntegerField(help_text="The last line read.")
    messages_made = serializers.IntegerField()
    rows_rejected = serializers.IntegerField(help_text="Invalid rows (GET .../errors).")
    duplicates_skipped = serializers.IntegerField()
    recipients_skipped = serializers.IntegerField(help_text="Opted out or refused destinations.")
    made_at = serializers.DateTimeField(allow_null=True, help_text="When the last message was made.")


class CampaignTimeOutput(serializers.Serializer):
    mode = serializers.ChoiceField(source="time_mode", choices=CampaignTimeMode.choices)
    send_at = serializers.CharField(source="requested_send_at", allow_null=True)
    timezone = serializers.CharField()
    dst_policy = serializers.CharField()


class CampaignTimestampsOutput(serializers.Serializer):
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    made_at = serializers.DateTimeField(allow_null=True)
    paused_at = serializers.DateTimeField(allow_null=True)
    cancelled_at = serializers.DateTimeField(allow_null=True)
    completed_at = serializers.DateTimeField(allow_null=True)


class CampaignOutput(PublicNames, serializers.Serializer):
    id = serializers.CharField(source="public_id")
    name = serializers.CharField()
    status = serializers.ChoiceField(
        choices=CampaignStatus.choices,
        help_text="creating: its list is being read and its messages made; active: they go out as they "
        "become due; paused; cancelled; completed: every message is final; failed: the list could not be "
        "read (status_reason says why).",
    )
    status_reason = serializers.SerializerMethodField()
    body = serializers.CharField(help_text="The body, or the template when is_template.")
    is_template = serializers.BooleanField()
    variables = serializers.ListField(child=serializers.CharField())
    sender_pool = serializers.CharField()
    priority = serializers.CharField()
    validity_seconds = serializers.IntegerField()
    metadata = serializers.DictField()
    time = serializers.SerializerMethodField()
    quiet_hours = serializers.DictField(help_text="The campaign's override ({}: the tenant's policy).")
    allow_duplicates = serializers.BooleanField()
    source_format = serializers.CharField()
    creation = serializers.SerializerMethodField()
    progress = serializers.SerializerMethodField()
    timestamps = serializers.SerializerMethodField()

    def get_status_reason(self, c: Campaign) -> str:
        return reason_for_tenant(c.status_reason) or ""  # "paused by operator", not the operator's name

    @extend_schema_field(CampaignTimeOutput)
    def get_time(self, c: Campaign) -> dict:
        return {
            "mode": c.time_mode,
            "send_at": c.requested_send_at or None,
            "timezone": c.timezone,
            "dst_policy": c.dst_policy,
        }

    @extend_schema_field(CreationOutput)
    def get_creation(self, c: Campaign) -> dict:
        return dict(CreationOutput(c).data)

    @extend_schema_field(
        serializers.DictField(
            child=serializers.IntegerField(),
            help_text="The campaign's messages by status (statuses with none are absent).",
        )
    )
    def get_progress(self, c: Campaign) -> dict:
        progress = self.context.get("progress")
        return progress.get(c.pk, {}) if progress is not None else progress_read(c.pk)

    @extend_schema_field(CampaignTimestampsOutput)
    def get_timestamps(self, c: Campaign) -> dict:
        return dict(CampaignTimestampsOutput(c).data)


@extend_schema_serializer(deprecate_fields=["phone"])
class CampaignErrorOutput(serializers.Serializer):
    line = serializers.IntegerField(
        help_text="CSV: the line (the header is line 1). JSON: the item (from 1)."
    )
    to = serializers.CharField(source="phone", help_text="The recipient as given.")
    phone = serializers.CharField(help_text=f"{DEPRECATED_ALIAS}: the same value.")
    field = serializers.CharField(
        help_text="to (phone for a list that used that deprecated alias), timezone, body, send_at, row or "
        "the variable's name."
    )
    code = serializers.CharField(
        help_text="invalid_number, invalid_timezone, missing_variable, too_long, duplicate, opted_out, "
        "send_at_passed, invalid_row, ..."
    )
    message = serializers.CharField()


class _Newest(StrictCursorPagination):
    ordering = "-id"


class _ByLine(StrictCursorPagination):
    ordering = "line"


PAGE_PARAMS = frozenset(("cursor", "page_size"))
LIST_PARAMS = PAGE_PARAMS | {"status"}


def _form_data(request) -> tuple[dict, object]:
    """A multipart body as the JSON body's dict (typed values) and the uploaded file."""
    form, files = request.data, request.FILES
    field = first_bad_field(form)
    if field is not None:
        raise field_error(field, NUL_OR_SURROGATE)
    unknown = sorted(set(files) - {"recipients"})
    if unknown:
        raise field_error(unknown[0][:64], "unknown file part")
    data: dict = {}
    for key in form:
        if key in files:
            continue
        values = form.getlist(key)
        if len(values) != 1:
            raise field_error(key[:64], "give this field once")
        value = values[0]
        if key in _FORM_INTEGERS and is_ascii_digits(value) and len(value) < 12:
            value = int(value)
        elif key in _FORM_BOOLEANS and value.lower() in ("true", "false"):
            value = value.lower() == "true"
        elif key in _FORM_OBJECTS:
            value = _form_object(key, value)
        data[key] = value
    if "recipients" in data:
        raise field_error("recipients", "must be an uploaded CSV file (a file part), not a text field")
    upload = files.get("recipients")
    if upload is None:
        raise field_error("recipients", "upload the recipient list as a CSV file part named recipients")
    if len(files.getlist("recipients")) != 1:
        raise field_error("recipients", "upload one file")
    return data, upload


def _form_object(key: str, text: str):
    """A JSON form field (metadata, quiet_hours) held to the JSON body's rules (StrictJSONParser): no
    nesting past MAX_JSON_DEPTH (deep enough, json.loads exhausts the interpreter's recursion limit: a
    500 before), no text PostgreSQL cannot store, no non-finite number."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise field_error(key, f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError:
        raise field_error(key, "must be a JSON object") from None
    problem = json_problem({key: value})
    if problem is not None:
        raise field_error(key, problem[1])
    return value


class CampaignsApi(APIView):
    required_scopes = {"GET": "campaigns:read", "POST": "campaigns:write"}

    parser_classes = [StrictJSONParser, MultiPartParser]

    @extend_schema(
        request={"application/json": CampaignCreateInput, "multipart/form-data": CampaignUploadInput},
        responses={
            202: OpenApiResponse(CampaignOutput, description="Accepted: its messages are being made."),
            200: OpenApiResponse(CampaignOutput, description="A replay of an earlier Idempotency-Key."),
            422: schema.IDEMPOTENCY_MISMATCH,
            429: schema.QUOTA_OR_RATE_LIMITED,
        },
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="1-255 characters. A repeat with the same request returns the original (200); "
                "with a different one, 422.",
            ),
            schema.location(200, 202, what="campaign"),
            schema.idempotent_replayed(200),
            *header_parameters([200, 202]),
        ],
        description=(
            "One body or template (`{first_name}` from each recipient's fields) to a list of recipients, as a"
            " JSON array or an uploaded CSV file (multipart). Answers 202 at once in status `creating`: the "
            "list is read and its messages made in the background (`creation` counts them; invalid rows are "
            "at .../errors). Then `active` until every message is final (`completed`). `phone` is a "
            "deprecated alias of `to` (`Deprecation` and `Sunset` headers). An `Idempotency-Key` makes a "
            "retry safe."
        ),
        summary="Create a campaign: recipients as a JSON array or an uploaded CSV file",
    )
    def post(self, request):
        # Uploaded files go to a temporary file as they arrive, never into memory whatever their size.
        request._request.upload_handlers = [TemporaryFileUploadHandler(request._request)]
        key = _idempotency_key(request.headers.get("Idempotency-Key"))
        if request.content_type.startswith("multipart/form-data"):
            data, upload = _form_data(request)
            serializer = CampaignUploadInput(data={**data, "recipients": upload})
            serializer.is_valid(raise_exception=True)
            fields = {k: v for k, v in serializer.validated_data.items() if k != "recipients"}
            source = services.Source(upload=upload)
        else:
            serializer = CampaignCreateInput(data=request.data)
            serializer.is_valid(raise_exception=True)
            fields = {k: v for k, v in serializer.validated_data.items() if k != "recipients"}
            source = services.Source(rows=serializer.validated_data["recipients"])
        campaign, created = services.campaign_create(
            tenant=request.user.tenant, actor=_actor(request), data=fields, source=source, idempotency_key=key
        )
        headers = {"Location": f"/v1/campaigns/{campaign.public_id}"}
        if not created:
            headers["Idempotent-Replayed"] = "true"
        response = Response(CampaignOutput(campaign).data, status=202 if created else 200, headers=headers)
        return deprecation_headers(response, services.source_aliases(source))

    @extend_schema(
        responses=schema.paginated(CampaignOutput, "CampaignPage"),
        parameters=schema.PAGE_PARAMETERS,
        description="The tenant's campaigns, newest first, with each one's status and progress.",
        summary="List campaigns (newest first, cursor pages)",
    )
    def get(self, request):
        strict_input.query_params_check(request.query_params, PAGE_PARAMS)
        paginator = _Newest()
        page = paginator.paginate_queryset(selectors.campaign_list(tenant=request.user.tenant), request, self)
        assert page is not None  # None only without a page size; StrictCursorPagination always has one
        progress = progress_read_many(c.pk for c in page)
        return paginator.get_paginated_response(
            CampaignOutput(page, many=True, context={"progress": progress}).data
        )


class CampaignDetailApi(APIView):
    required_scopes = {"GET": "campaigns:read"}

    @extend_schema(
        responses=CampaignOutput,
        description=(
            "The campaign with `creation` (rows read, messages made, rows rejected) and `progress` (its "
            "messages by status)."
        ),
        summary="Get one campaign, with its progress by status",
    )
    def get(self, request, public_id: str):
        campaign = services.campaign_get(tenant=request.user.tenant, public_id=public_id)
        return Response(CampaignOutput(campaign).data)


class CampaignMessagesApi(APIView):
    required_scopes = {"GET": "campaigns:read"}

    @extend_schema(
        responses=schema.paginated(MessageOutput, "CampaignMessagePage"),
        parameters=[
            OpenApiParameter("status", str, description="Comma-separated statuses, e.g. scheduled,failed."),
            *schema.PAGE_PARAMETERS,
        ],
        description="The messages the campaign made, newest first, filtered by status.",
        summary="The campaign's messages (newest first, cursor pages)",
    )
    def get(self, request, public_id: str):
        campaign = services.campaign_get(tenant=request.user.tenant, public_id=public_id)
        strict_input.query_params_check(request.query_params, LIST_PARAMS)
        qs = selectors.campaign_messages(campaign=campaign, params=request.query_params)
        paginator = _Newest()
        page = paginator.paginate_queryset(qs, request, view=self)
        assert page is not None  # None only without a page size; StrictCursorPagination always has one
        return paginator.get_paginated_response([message_data(m) for m in page])


class CampaignErrorsApi(APIView):
    required_scopes = {"GET": "campaigns:read"}

    @extend_schema(
        responses=schema.paginated(CampaignErrorOutput, "CampaignErrorPage"),
        parameters=schema.PAGE_PARAMETERS,
        description=(
            "Each recipient row that was not made into a message, in list order: its line, the value, the "
            "field and a `code` (invalid_number, missing_variable, duplicate, opted_out, ...)."
        ),
        summary="Rows not made into messages, by line (cursor pages)",
    )
    def get(self, request, public_id: str):
        campaign = services.campaign_get(tenant=request.user.tenant, public_id=public_id)
        strict_input.query_params_check(request.query_params, PAGE_PARAMS)
        paginator = _ByLine()
        page = paginator.paginate_queryset(selectors.campaign_errors(campaign=campaign), request, view=self)
        return paginator.get_paginated_response(CampaignErrorOutput(page, many=True).data)
