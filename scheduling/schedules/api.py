"""Tenant API for recurring schedules and the tenant's quiet hours (docs/scheduling.md). One thin view per
endpoint; the rules live in ``scheduling.schedules.service`` (writes) and
``scheduling.schedules.selectors``."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduling.facade.names import SENDER_POOL_FIELD, SENDER_POOL_MAX_LENGTH
from scheduling.facade.outputs import PublicNames
from scheduling.messages import examples
from scheduling.messages.api import StrictSerializer, _idempotency_key, _metadata
from scheduling.models import Priority, Schedule, ScheduleStatus, Status
from scheduling.schedules import selectors
from scheduling.schedules import service as services
from scheduling.schedules.materialize import naive
from smsgw.config.providers import body_max_length
from smsgw.http import schema, strict_input
from smsgw.http.pagination import StrictCursorPagination
from smsgw.values.actors import actor_for_tenant
from smsgw.values.timeutil import utc_text

# One definition of the strictness and metadata rules for both message and schedule input.
_Strict = StrictSerializer


def _schedule_fields(required: bool) -> dict:
    return {
        "to": serializers.CharField(max_length=32, required=required, help_text="Recipient, E.164."),
        "body": serializers.CharField(max_length=body_max_length(), trim_whitespace=False, required=required),
        "from": serializers.CharField(max_length=32, required=False),
        SENDER_POOL_FIELD: serializers.CharField(max_length=SENDER_POOL_MAX_LENGTH, required=False),
        "rrule": serializers.CharField(
            max_length=1000,
            required=required,
            help_text="RFC 5545 RRULE, e.g. FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR;UNTIL=20270630T215959Z. "
            "Evaluated in local wall time; UNTIL is a UTC date-time.",
        ),
        "start": serializers.CharField(
            max_length=64,
            required=required,
            help_text="DTSTART as a local wall time without offset, e.g. 2026-12-01T08:30:00.",
        ),
        "timezone": serializers.CharField(
            max_length=64, required=False, help_text="IANA zone; default: the tenant's timezone."
        ),
        "dst_policy": serializers.ChoiceField(choices=["earlier", "later"], required=False),
        "exdate": serializers.ListField(
            child=serializers.CharField(max_length=40),
            required=False,
            max_length=500,
            help_text="Exceptions in the schedule's local time: 2026-12-25 (the day) or 2026-12-25T08:30:00.",
        ),
        "priority": serializers.ChoiceField(choices=Priority.choices, required=False),
        "validity_seconds": serializers.IntegerField(min_value=60, max_value=7 * 86400, required=False),
        "metadata": serializers.DictField(required=False, validators=[_metadata]),
        "quiet_hours": serializers.JSONField(
            required=False,
            help_text='{"start": "21:00", "end": "08:00"} replaces the tenant\'s window; '
            '{"enabled": false} switches quiet hours off for this schedule.',
        ),
        "recipient_timezone": serializers.CharField(
            max_length=64, required=False, help_text="Where quiet hours are evaluated; default: tenant's."
        ),
    }


ScheduleCreateInput = type("ScheduleCreateInput", (_Strict,), _schedule_fields(True))
ScheduleUpdateInput = type("ScheduleUpdateInput", (_Strict,), _schedule_fields(False))


class ScheduleQuietOutput(serializers.Serializer):
    requested = serializers.DictField(allow_null=True, help_text="The schedule's own override, if any.")
    effective = serializers.DictField(allow_null=True, help_text="The window that applies (null: none).")


class NextOccurrenceOutput(serializers.Serializer):
    local_time = serializers.CharField()
    occurrence_at = serializers.DateTimeField()


class ScheduleTimestampsOutput(serializers.Serializer):
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    paused_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    cancelled_at = serializers.DateTimeField(allow_null=True)


class ScheduleOutput(PublicNames, serializers.Serializer):
    id = serializers.CharField(source="public_id")
    status = serializers.ChoiceField(
        choices=ScheduleStatus.choices,
        help_text="active: makes its occurrences; paused: makes none until resumed; ended: the rule has no "
        "further occurrence; cancelled: for good.",
    )
    version = serializers.IntegerField()
    to = serializers.CharField()
    body = serializers.CharField()
    sender_pool = serializers.CharField()
    priority = serializers.CharField()
    metadata = serializers.DictField()
    validity_seconds = serializers.IntegerField()
    rrule = serializers.CharField()
    start = serializers.SerializerMethodField()
    timezone = serializers.CharField()
    dst_policy = serializers.CharField()
    exdate = serializers.ListField(child=serializers.CharField())
    quiet_hours = serializers.SerializerMethodField()
    recipient_timezone = serializers.CharField()
    next_occurrence = serializers.SerializerMethodField()
    materialized_until = serializers.DateTimeField(allow_null=True)
    materialized_count = serializers.IntegerField()
    timestamps = serializers.SerializerMethodField()

    def get_start(self, s: Schedule) -> str:
        return naive(s.start_local).isoformat()

    @extend_schema_field(ScheduleQuietOutput)
    def get_quiet_hours(self, s: Schedule) -> dict:
        window = services.quiet_window_of(s, s.tenant)
        return {"requested": s.quiet_hours or None, "effective": window.as_dict() if window else None}

    @extend_schema_field(NextOccurrenceOutput(allow_null=True))
    def get_next_occurrence(self, s: Schedule) -> dict | None:
        """The materializer's cursor: the first occurrence not yet made into a message."""
        if s.cursor_local is None:
            return None
        assert s.next_occurrence_at is not None  # set and cleared together with cursor_local
        return {
            "local_time": naive(s.cursor_local).isoformat(),
            "occurrence_at": utc_text(s.next_occurrence_at),
        }

    @extend_schema_field(ScheduleTimestampsOutput)
    def get_timestamps(self, s: Schedule) -> dict:
        names = ("created_at", "updated_at", "paused_at", "ended_at", "cancelled_at")
        return {n: (utc_text(getattr(s, n)) if getattr(s, n) else None) for n in names}


class OccurrenceChangesOutput(serializers.Serializer):
    materialized = serializers.IntegerField(help_text="Occurrences made into messages by this change.")
    cancelled = serializers.ListField(child=serializers.CharField(), help_text="Messages cancelled.")
    kept = serializers.ListField(
        child=serializers.DictField(), help_text="Messages already on their way, left as they were."
    )


class ScheduleChangeOutput(ScheduleOutput):
    """A schedule after a write, with what the write did to its occurrences."""

    occurrences = OccurrenceChangesOutput()
    changed = serializers.BooleanField(help_text="False when the call changed nothing (e.g. a repeat).")


class VersionOutput(serializers.Serializer):
    version = serializers.IntegerField(source="number")
    change = serializers.CharField()
    status = serializers.ChoiceField(choices=ScheduleStatus.choices, help_text="The schedule's, after it.")
    changed_fields = serializers.ListField(child=serializers.CharField())
    definition = serializers.DictField()
    actor = serializers.CharField(
        help_text='Who made the change: "apikey:<prefix>" (one of your API keys), "operator" (the '
        'gateway\'s staff) or "system".'
    )
    created_at = serializers.DateTimeField()

    def to_representation(self, instance):
        data = super().to_representation(instance)
        data["actor"] = actor_for_tenant(data["actor"])  # the admin shows the operator's name
        return data


class OccurrenceMessageOutput(serializers.Serializer):
    id = serializers.CharField(source="public_id")
    status = serializers.ChoiceField(choices=Status.choices)
    schedule_version = serializers.IntegerField()
    occurrence = serializers.CharField(source="occurrence_key")
    local_time = serializers.SerializerMethodField()
    timezone = serializers.CharField(source="requested_timezone")
    dst_adjustment = serializers.CharField()
    due_at = serializers.DateTimeField()
    quiet_deferred_from = serializers.DateTimeField(allow_null=True)
    sent_at = serializers.DateTimeField(allow_null=True)
    cancelled_at = serializers.DateTimeField(allow_null=True)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_local_time(self, m) -> str | None:
        return naive(m.requested_local_time).isoformat() if m.requested_local_time else None


class OccurrencePreviewOutput(serializers.Serializer):
    local_time = serializers.CharField(help_text="Local wall time the rule produced.")
    timezone = serializers.CharField()
    occurrence_at = serializers.CharField(help_text="That wall time resolved to UTC.")
    dst_adjustment = serializers.CharField()
    dst_note = serializers.CharField(required=False)
    due_at = serializers.CharField(help_text="When it is sent: after any quiet-hours move.")
    quiet_hours_moved = serializers.BooleanField()
    message = serializers.DictField(allow_null=True, help_text="The message made for it, if any.")


class _Cursor(StrictCursorPagination):
    ordering = "-id"


def _actor(request) -> str:
    return str(request.user)


def _change_response(change: services.ScheduleChange, code: int = status.HTTP_200_OK) -> Response:
    body = dict(ScheduleOutput(change.schedule).data)
    body["occurrences"] = {
        "materialized": change.materialized.created,
        "cancelled": change.cancelled,
        "kept": change.kept,
    }
    body["changed"] = change.changed
    headers = {"Location": f"/v1/schedules/{change.schedule.public_id}"}
    if change.replayed:
        headers["Idempotent-Replayed"] = "true"
    return Response(body, status=code, headers=headers)


# The query parameters each read accepts; any other is a 400 naming it.
PAGE_PARAMS = frozenset(("cursor", "page_size"))
LIST_PARAMS = PAGE_PARAMS | {"status", "to"}
PREVIEW_PARAMS = frozenset(("count", "after"))


class SchedulesApi(APIView):
    required_scopes = {"GET": "schedules:read", "POST": "schedules:write"}

    @extend_schema(
        request=ScheduleCreateInput,
        responses={
            201: ScheduleChangeOutput,
            200: OpenApiResponse(
                ScheduleChangeOutput,
                description="A replay of an earlier Idempotency-Key: the schedule it made, as it is now "
                "(`changed: false`, nothing materialized by this request).",
            ),
            422: schema.IDEMPOTENCY_MISMATCH,
        },
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="1-255 characters. A repeat with the same body returns the schedule the first "
                "request made (200, `Idempotent-Replayed: true`); with a different body, 422. "
                "See docs/idempotency.md.",
            ),
            schema.location(200, 201, what="schedule"),
            schema.idempotent_replayed(200),
        ],
        examples=[examples.RECURRING],
        description=(
            "A message sent at each occurrence of an RRULE (RFC 5545) evaluated in local wall time in "
            "`timezone`: 08:30 stays 08:30 across DST. Occurrences are made into messages ahead of time (GET "
            ".../messages), `exdate` skips days, quiet hours apply. The schedule starts `active`. An "
            "`Idempotency-Key` makes a retry safe (docs/idempotency.md)."
        ),
        summary="Create a recurring schedule",
    )
    def post(self, request):
        key = _idempotency_key(request.headers.get("Idempotency-Key"))
        data = ScheduleCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        change = services.schedule_create(
            tenant=request.user.tenant, actor=_actor(request), data=data.validated_data, idempotency_key=key
        )
        return _change_response(change, status.HTTP_200_OK if change.replayed else status.HTTP_201_CREATED)

    @extend_schema(
        responses=schema.paginated(ScheduleOutput, "SchedulePage"),
        parameters=[
            OpenApiParameter("status", str, description="Comma-separated statuses."),
            OpenApiParameter("to", str, description="Recipient, normalised like the `to` field."),
            *schema.PAGE_PARAMETERS,
        ],
        description="The tenant's schedules, newest first, filtered by status and recipient.",
        summary="List schedules (newest first, cursor pages)",
    )
    def get(self, request):
        strict_input.query_params_check(request.query_params, LIST_PARAMS)
        qs = selectors.schedule_list(tenant=request.user.tenant, params=request.query_params)
        paginator = _Cursor()
        page = paginator.paginate_queryset(qs, request, view=self)
        assert page is not None  # None only without a page size; StrictCursorPagination always has one
        for s in page:
            s.tenant = request.user.tenant
        return paginator.get_paginated_response(ScheduleOutput(page, many=True).data)


class ScheduleDetailApi(APIView):
    required_scopes = {"GET": "schedules:read", "PATCH": "schedules:write"}

    @extend_schema(
        responses=ScheduleOutput,
        description=(
            "The schedule's definition, status (`active`, `paused`, `ended`, `cancelled`), version and next "
            "occurrence."
        ),
        summary="Get one schedule",
    )
    def get(self, request, public_id: str):
        schedule = services.schedule_get(tenant=request.user.tenant, public_id=public_id)
        return Response(ScheduleOutput(schedule).data)

    @extend_schema(
        request=ScheduleUpdateInput,
        responses={200: ScheduleChangeOutput, 409: schema.SCHEDULE_CONFLICT},
        parameters=[schema.location(200, what="schedule")],
        description=(
            "Changes a schedule that is not cancelled: a new version. Its pending occurrences are cancelled "
            "and made again from the new definition; occurrences already on their way are kept "
            "(`occurrences.kept`). 409 on a cancelled schedule."
        ),
        summary="Change a schedule: a new version; pending occurrences are cancelled and regenerated",
    )
    def patch(self, request, public_id: str):
        data = ScheduleUpdateInput(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        change = services.schedule_update(
            tenant=request.user.tenant, public_id=public_id, actor=_actor(request), data=data.validated_data
        )
        return _change_response(change)


def _action_view(name: str, service, summary: str, description: str, *, conflict: bool = True):
    responses = {200: ScheduleChangeOutput, **({409: schema.SCHEDULE_CONFLICT} if conflict else {})}

    class _View(APIView):
        required_scopes = {"POST": "schedules:write"}

        @extend_schema(
            request=None,
            responses=responses,
            parameters=[schema.location(200, what="schedule")],
            summary=summary,
            description=description,
        )
        def post(self, request, public_id: str):
            change = service(tenant=request.user.tenant, public_id=public_id, actor=_actor(request))
            return _change_response(change)

    _View.__name__ = _View.__qualname__ = name
    return _View


SchedulePauseApi = _action_view(
    "SchedulePauseApi",
    services.schedule_pause,
    "Pause: cancels pending occurrences, makes no new ones",
    "Pauses an `active` schedule: its pending occurrences are cancelled and none are made until it is "
    "resumed. A repeat answers 200 with `changed: false`. 409 on a cancelled or ended one.",
)
ScheduleResumeApi = _action_view(
    "ScheduleResumeApi",
    services.schedule_resume,
    "Resume from the next occurrence after now",
    "Resumes a paused schedule from its next occurrence after now (those missed while paused are not "
    "sent). A repeat on an active schedule answers 200. 409 on a cancelled or ended one.",
)
ScheduleCancelApi = _action_view(
    "ScheduleCancelApi",
    services.schedule_cancel,
    "Cancel for good: cancels pending occurrences (a repeat answers 200, changed: false)",
    "Cancels the schedule for good: its pending occurrences are cancelled and none are made again. "
    "Occurrences already on their way are kept (`occurrences.kept`). A repeat answers 200 with "
    "`changed: false`.",
    conflict=False,
)


class OccurrencesOutput(serializers.Serializer):
    schedule = serializers.CharField(help_text="The schedule's id.")
    status = serializers.ChoiceField(choices=ScheduleStatus.choices)
    occurrences = OccurrencePreviewOutput(many=True)


class VersionsOutput(serializers.Serializer):
    schedule = serializers.CharField(help_text="The schedule's id.")
    versions = VersionOutput(many=True)


class ScheduleOccurrencesApi(APIView):
    required_scopes = {"GET": "schedules:read"}

    @extend_schema(
        parameters=[
            OpenApiParameter("count", int, description=f"1-{selectors.PREVIEW_MAX}, default 10"),
            OpenApiParameter("after", str, description="ISO 8601 instant; default now"),
        ],
        responses=OccurrencesOutput,
        description=(
            "What the rule produces next (up to `count`), each as a local wall time and its UTC instant, with"
            " any DST adjustment and quiet-hours move, and the message made for it, if any. Nothing is "
            "changed."
        ),
        summary="Preview the next N occurrences in local time and UTC",
    )
    def get(self, request, public_id: str):
        schedule = services.schedule_get(tenant=request.user.tenant, public_id=public_id)
        strict_input.query_params_check(request.query_params, PREVIEW_PARAMS)
        items = selectors.schedule_preview(schedule=schedule, params=request.query_params)
        for item in items:
            for key in ("occurrence_at", "due_at"):
                item[key] = utc_text(item[key])
        return Response({"schedule": schedule.public_id, "status": schedule.status, "occurrences": items})


class ScheduleVersionsApi(APIView):
    required_scopes = {"GET": "schedules:read"}

    @extend_schema(
        responses=VersionsOutput,
        description=(
            "Each version of the schedule, oldest first: what changed, its definition, who changed it and "
            "when."
        ),
        summary="Every version, with actor and time",
    )
    def get(self, request, public_id: str):
        schedule = services.schedule_get(tenant=request.user.tenant, public_id=public_id)
        versions = selectors.schedule_versions(schedule=schedule)
        return Response({"schedule": schedule.public_id, "versions": VersionOutput(versions, many=True).data})


class ScheduleMessagesApi(APIView):
    required_scopes = {"GET": "schedules:read"}

    @extend_schema(
        responses=schema.paginated(OccurrenceMessageOutput, "OccurrenceMessagePage"),
        parameters=schema.PAGE_PARAMETERS,
        description="The messages this schedule has made, newest first, with their occurrence and status.",
        summary="Occurrences made so far (newest first, cursor pages)",
    )
    def get(self, request, public_id: str):
        schedule = services.schedule_get(tenant=request.user.tenant, public_id=public_id)
        strict_input.query_params_check(request.query_params, PAGE_PARAMS)
        paginator = _Cursor()
        page = paginator.paginate_queryset(selectors.schedule_messages(schedule=schedule), request, view=self)
        return paginator.get_paginated_response(OccurrenceMessageOutput(page, many=True).data)


class QuietHoursInput(_Strict):
    start = serializers.CharField(max_length=8, allow_null=True, help_text="Local HH:MM, e.g. 21:00")
    end = serializers.CharField(max_length=8, allow_null=True, help_text="Local HH:MM, e.g. 08:00")
    exempt_transactional = serializers.BooleanField(required=False)


@extend_schema_field({"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$", "example": "21:00"})
class _HourMinuteField(serializers.TimeField):
    """A local time of day as HH:MM (OpenAPI's "time" format would need seconds and an offset)."""


class QuietHoursOutput(serializers.Serializer):
    start = _HourMinuteField(source="quiet_hours_start", format="%H:%M", allow_null=True)
    end = _HourMinuteField(source="quiet_hours_end", format="%H:%M", allow_null=True)
    timezone = serializers.CharField(source="default_timezone")
    exempt_transactional = serializers.BooleanField(source="quiet_hours_exempt_transactional")


class QuietHoursApi(APIView):
    required_scopes = {"GET": "quiet-hours:read", "PUT": "quiet-hours:write", "DELETE": "quiet-hours:write"}

    @extend_schema(
        responses=QuietHoursOutput,
        description=(
            "The tenant's default window (local time of the recipient) in which nothing is sent; a message "
            "due inside it waits until it ends. Off when `start` and `end` are null."
        ),
        summary="The tenant's quiet-hours policy",
    )
    def get(self, request):
        return Response(QuietHoursOutput(request.user.tenant).data)

    @extend_schema(
        request=QuietHoursInput,
        responses=QuietHoursOutput,
        examples=[examples.QUIET_HOURS],
        description=(
            "Sets the tenant's default quiet window (HH:MM to HH:MM, across midnight allowed), and whether "
            "transactional messages are exempt. Applies to messages scheduled from now on."
        ),
        summary="Set quiet hours",
    )
    def put(self, request):
        data = QuietHoursInput(data=request.data)
        data.is_valid(raise_exception=True)
        tenant = services.tenant_quiet_hours_set(tenant=request.user.tenant, data=data.validated_data)
        return Response(QuietHoursOutput(tenant).data)

    # 200 with the resulting policy, like PUT: the policy stays (start and end null), only the window goes.
    @extend_schema(
        request=None,
        responses={200: QuietHoursOutput},
        description=(
            "Removes the tenant's default quiet window. Messages and schedules with their own override keep "
            "it."
        ),
        summary="Switch quiet hours off",
    )
    def delete(self, request):
        tenant = services.tenant_quiet_hours_set(
            tenant=request.user.tenant, data={"start": None, "end": None}
        )
        return Response(QuietHoursOutput(tenant).data)
