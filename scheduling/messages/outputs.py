"""A message as the tenant API shows it (docs/api.md): ``MessageOutput`` for the OpenAPI schema,
``message_data`` for the responses (the same keys, order and values, without a serializer), and a
timeline entry (``EventOutput``)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling.facade.names import SENDER_POOL_FIELD
from scheduling.facade.outputs import PublicNames
from scheduling.lifecycle.kinds import EventKind
from scheduling.lifecycle.reasons import ReasonCode
from scheduling.models import Message, Priority, Status
from smsgw.config.routes import leg_public
from smsgw.values.actors import actor_for_tenant, details_for_tenant, reason_for_tenant
from smsgw.values.timeutil import utc_text, utc_texts

_TIMESTAMP_FIELDS = (
    "created_at",
    "queued_at",
    "sending_at",
    "sent_at",
    "delivered_at",
    "failed_at",
    "cancelled_at",
    "expired_at",
)


def _requested(m: Message) -> dict:
    return {
        "send_at": m.requested_send_at or None,
        "local_time": m.requested_local_time.replace(tzinfo=None).isoformat()
        if m.requested_local_time
        else None,
        "timezone": m.requested_timezone or None,
        "dst_policy": m.dst_policy,
        "dst_adjustment": m.dst_adjustment,
    }


def _timestamps(m: Message) -> dict:
    return {n: (utc_text(getattr(m, n)) if getattr(m, n) else None) for n in _TIMESTAMP_FIELDS}


class RequestedOutput(serializers.Serializer):
    send_at = serializers.CharField(allow_null=True, help_text="`send_at` as given (null: send now).")
    local_time = serializers.CharField(allow_null=True, help_text="The local wall time asked for.")
    timezone = serializers.CharField(allow_null=True)
    dst_policy = serializers.CharField()
    dst_adjustment = serializers.CharField(help_text="How a skipped or repeated local time was resolved.")


TimestampsOutput = type(
    "TimestampsOutput",
    (serializers.Serializer,),
    {n: serializers.DateTimeField(allow_null=True) for n in _TIMESTAMP_FIELDS},
)


class ScheduleRefOutput(serializers.Serializer):
    id = serializers.CharField()
    version = serializers.IntegerField(allow_null=True)
    occurrence_key = serializers.CharField()


class RouteLegOutput(serializers.Serializer):
    provider = serializers.CharField()
    account = serializers.CharField(help_text="Empty: the provider's configured account.")
    sender = serializers.CharField(help_text="The From or sender pool used on this leg.")


class RouteOutput(serializers.Serializer):
    name = serializers.CharField(
        help_text='The rule that routed it ("tenant:<name>", "all:<name>", "settings:<name>"), or "default".'
    )
    leg = serializers.IntegerField(help_text="The leg it is on (0: the first); a failover moves it on.")
    legs = RouteLegOutput(many=True, help_text="The legs in the order they are tried.")


class MessageQuietOutput(serializers.Serializer):
    start = serializers.CharField(allow_null=True)
    end = serializers.CharField(allow_null=True)
    timezone = serializers.CharField()
    deferred_from = serializers.DateTimeField(allow_null=True)


# The message as the API shows it, for the OpenAPI schema. Responses are built by ``message_data``,
# which returns exactly what this serializer's ``.data`` would (a docstring here would show in the schema).
class MessageOutput(PublicNames, serializers.Serializer):
    id = serializers.CharField(source="public_id")
    status = serializers.ChoiceField(
        choices=Status.choices,
        help_text="scheduled and queued: waiting (cancellable); sending: with the provider; sent, then "
        "delivered or undelivered from the carrier's receipt; failed, cancelled and expired: final, unsent.",
    )
    status_reason = serializers.CharField(help_text="Why, for a person; '' when there is nothing to say.")
    reason_code = serializers.ChoiceField(
        choices=ReasonCode.choices,
        allow_blank=True,
        help_text="Why, for a program: why it waits, or why it ended unsent or failed; '' when it is on its "
        "way or was sent.",
    )
    to = serializers.CharField()
    body = serializers.CharField()
    encoding = serializers.CharField()
    segments = serializers.IntegerField()
    priority = serializers.ChoiceField(choices=Priority.choices)
    sender_pool = serializers.CharField()
    metadata = serializers.DictField()
    uncertain_wait_seconds = serializers.IntegerField(allow_null=True)
    requested = serializers.SerializerMethodField()
    due_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    expected_send_at = serializers.DateTimeField(
        allow_null=True, help_text="When it is expected to reach the provider; null once on its way."
    )
    provider = serializers.CharField()
    provider_message_id = serializers.CharField(allow_null=True)
    provider_status = serializers.CharField()
    error_code = serializers.CharField()
    attempts = serializers.IntegerField(source="attempt_count")
    version = serializers.IntegerField()
    timestamps = serializers.SerializerMethodField()
    schedule = serializers.SerializerMethodField()
    quiet_hours = serializers.SerializerMethodField()
    route = serializers.SerializerMethodField()

    @extend_schema_field(RequestedOutput)
    def get_requested(self, m: Message) -> dict:
        return _requested(m)

    @extend_schema_field(TimestampsOutput)
    def get_timestamps(self, m: Message) -> dict:
        return _timestamps(m)

    @extend_schema_field(ScheduleRefOutput(allow_null=True))
    def get_schedule(self, m: Message) -> dict | None:
        return _schedule(m)

    @extend_schema_field(MessageQuietOutput(allow_null=True))
    def get_quiet_hours(self, m: Message) -> dict | None:
        return _quiet(m)

    @extend_schema_field(RouteOutput)
    def get_route(self, m: Message) -> dict:
        return _route(m)


def _route(m: Message) -> dict:
    """The message's route: its rule, its legs (provider, account, sender) and the leg it is on. Without
    a rule: the one leg it has, its provider with its own sender."""
    legs = [leg_public(leg) for leg in (m.route_plan or [])]
    if not legs:
        legs = [{"provider": m.provider, "account": "", "sender": m.from_number or m.sender_pool}]
    return {"name": m.route or "default", "leg": m.route_leg or 0, "legs": legs}


def _schedule(m: Message) -> dict | None:
    """The recurring schedule an occurrence came from (null for one-off messages)."""
    if not m.occurrence_key:
        return None
    return {
        "id": m.occurrence_key.split(":", 1)[0],
        "version": m.schedule_version,
        "occurrence_key": m.occurrence_key,
    }


def _quiet(m: Message) -> dict | None:
    """The quiet window applied when the message was scheduled, and the move it caused (if any)."""
    if not m.quiet_timezone:
        return None
    return {
        "start": m.quiet_start.isoformat() if m.quiet_start else None,
        "end": m.quiet_end.isoformat() if m.quiet_end else None,
        "timezone": m.quiet_timezone,
        "deferred_from": utc_text(m.quiet_deferred_from) if m.quiet_deferred_from else None,
    }


# DRF's representation of each field type, applied as MessageOutput applies it: None stays None.
_datetime = serializers.DateTimeField().to_representation


def _str(value):
    return None if value is None else str(value)


def _int(value):
    return None if value is None else int(value)


def _expected(m: Message) -> str | None:
    """When the message is expected to be handed to the provider: its due time, or the slot it waits
    for (paced, provider unavailable, held, a retry's backoff). Null once it is on its way or done."""
    held = m.reason_code == ReasonCode.HELD_FOR_REVIEW  # not before an operator releases it
    if m.run_after is None or held:
        return None
    if m.status == Status.SCHEDULED or (
        m.status == Status.QUEUED and m.reason_code not in ("", ReasonCode.CIRCUIT_PROBE)
    ):
        return _datetime(m.run_after)
    return None


def message_data(m: Message) -> dict:
    """``MessageOutput(m).data`` as a plain dict (same keys, order and values), without a serializer."""
    metadata = m.metadata
    return {
        "id": _str(m.public_id),
        "status": _str(m.status),
        "status_reason": _str(reason_for_tenant(m.status_reason)),
        "reason_code": _str(m.reason_code),
        "to": _str(m.to),
        "body": _str(m.body),
        "encoding": _str(m.encoding),
        "segments": _int(m.segments),
        "priority": _str(m.priority),
        SENDER_POOL_FIELD: _str(m.sender_pool),
        "metadata": None if metadata is None else {str(k): v for k, v in metadata.items()},
        "uncertain_wait_seconds": m.uncertain_wait_seconds,
        "requested": _requested(m),
        "due_at": None if m.due_at is None else _datetime(m.due_at),
        "expires_at": None if m.expires_at is None else _datetime(m.expires_at),
        "expected_send_at": _expected(m),
        "provider": _str(m.provider),
        "provider_message_id": _str(m.provider_message_id),
        "provider_status": _str(m.provider_status),
        "error_code": _str(m.error_code),
        "attempts": _int(m.attempt_count),
        "version": _int(m.version),
        "timestamps": _timestamps(m),
        "schedule": _schedule(m),
        "quiet_hours": _quiet(m),
        "route": _route(m),
        "from": _str(m.from_number),
    }


class EventOutput(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=EventKind.choices, help_text="What happened.")
    # '' on an entry that is not a status change and on a message that had none yet.
    from_status = serializers.ChoiceField(choices=Status.choices, allow_blank=True)
    to_status = serializers.ChoiceField(choices=Status.choices, allow_blank=True)
    actor = serializers.CharField(
        help_text='Who acted: "apikey:<prefix>" (one of your API keys), "recipient" (a STOP reply), '
        '"operator" (the gateway\'s staff) or "system" (the gateway itself).'
    )
    details = serializers.DictField()
    created_at = serializers.DateTimeField()

    def to_representation(self, instance):
        # The database keeps the full actor (the admin shows an operator's name); the tenant sees its
        # kind (smsgw.values.actors).
        data = super().to_representation(instance)
        data["actor"] = actor_for_tenant(data["actor"])
        data["details"] = utc_texts(details_for_tenant(data["details"]))
        return data
