"""Writes behind the tenant API: create and cancel, and the checks of a request's values they share with
an edit (scheduling.messages.edits) and a schedule (scheduling.schedules.service); what is done to a message
that has left the gateway is scheduling.messages.final. Views call these and nothing else writes a
message. Status changes go through ``scheduling.lifecycle.transitions``."""

from __future__ import annotations

import hashlib
import json
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from scheduling.dispatch import quiet
from scheduling.facade.names import SENDER_POOL_FIELD
from scheduling.lifecycle import transitions
from scheduling.lifecycle.reasons import ReasonCode
from scheduling.limits import quotas
from scheduling.messages import acceptance, birth
from scheduling.models import Message, Priority, Status
from smsgw.channels import DEFAULT_CHANNEL, AddressError
from smsgw.config.providers import sender_pool_problem
from smsgw.domain_errors import ConflictError, IdempotencyMismatch, InvalidInput, NotFoundError
from smsgw.models import Tenant
from smsgw.observability import events
from smsgw.tenancy.priority import priority_for
from smsgw.tenancy.senders import OwnershipCheck
from smsgw.values.timeutil import DstPolicy, ResolvedTime, TimeResolutionError, check_window, resolve_send_at

REASON_CANCELLED = ReasonCode.CANCELLED_BY_REQUEST  # after the tenant's (or an operator's) cancel


@dataclass(frozen=True)
class Resolved:
    """Validated, normalised request values ready to store."""

    values: dict[str, Any]
    time: ResolvedTime | None


def _recipient(raw: str) -> str:
    try:
        return DEFAULT_CHANNEL.address(raw)
    except AddressError as exc:
        raise InvalidInput("to", str(exc)) from exc


def _body(body: str) -> tuple[str, int]:
    if not body or not body.strip():
        raise InvalidInput("body", "must not be empty", reason="empty")
    cost = DEFAULT_CHANNEL.cost(body)
    if cost.units > settings.MAX_SEGMENTS:
        raise InvalidInput(
            "body",
            f"needs {cost.units} {cost.encoding} segments; the limit is {settings.MAX_SEGMENTS}",
            reason="too_long",
        )
    return cost.encoding, cost.units


def _sender(
    tenant: Tenant, from_number: str | None, pool: str | None, owns: OwnershipCheck | None = None
) -> tuple[str, str]:
    """(from, sender pool) of a request, normalised, or the tenant's defaults when it names neither. A
    sender the tenant does not own (smsgw.tenancy.senders) is refused naming its field: every tenant
    sends through the same provider accounts, so a format check alone would let one send as another."""
    owns = owns or OwnershipCheck(tenant)
    if from_number:
        try:
            sender = DEFAULT_CHANNEL.sender(from_number)
        except AddressError as exc:
            raise InvalidInput("from", str(exc)) from exc
        return _owned(owns, "from", sender), ""
    if pool:
        problem = sender_pool_problem(pool)  # as the providers declare their pool ids
        if problem:
            raise InvalidInput(SENDER_POOL_FIELD, problem)
        return "", _owned(owns, SENDER_POOL_FIELD, pool)
    if tenant.default_from or tenant.sender_pool:
        return tenant.default_from, "" if tenant.default_from else tenant.sender_pool
    raise InvalidInput("from", "no sender given and the tenant has no default sender", reason="no_sender")


def _owned(owns: OwnershipCheck, field: str, sender: str) -> str:
    # The same answer whether another tenant owns it or nobody does: no probing of others' senders.
    if not owns.owns(sender):
        raise InvalidInput(
            field, "is not one of this tenant's senders (the operator assigns them)", reason="not_owned"
        )
    return sender


def _time(tenant: Tenant, send_at: str | None, tz_name: str | None, policy: str | None, now: datetime):
    try:
        dst_policy = DstPolicy(policy or DstPolicy.EARLIER)
    except ValueError as exc:
        raise InvalidInput("dst_policy", "must be 'earlier' or 'later'") from exc
    if not send_at:
        if tz_name:
            from smsgw.values.timeutil import parse_timezone

            try:
                parse_timezone(tz_name)
            except TimeResolutionError as exc:
                raise InvalidInput(exc.field, str(exc), reason=exc.code) from exc
        return None, dst_policy
    try:
        resolved = resolve_send_at(send_at, tz_name, dst_policy, tenant.default_timezone or "UTC")
    except TimeResolutionError as exc:
        raise InvalidInput(exc.field, str(exc), reason=exc.code) from exc
    try:
        check_window(
            resolved.due_at,
            now=now,
            past_tolerance_seconds=settings.SEND_AT_PAST_TOLERANCE_SECONDS,
            max_ahead_days=settings.MAX_SCHEDULE_AHEAD_DAYS,
        )
    except TimeResolutionError as exc:
        raise InvalidInput(exc.field, str(exc), reason="window") from exc
    return resolved, dst_policy


def fingerprint_of(data: dict) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _time_fields(
    resolved: ResolvedTime | None, raw_send_at: str, tz_name: str, policy: DstPolicy, now: datetime
) -> dict[str, Any]:
    due = max(resolved.due_at, now) if resolved else now
    return {
        "requested_send_at": raw_send_at or "",
        "requested_local_time": (
            timezone.make_aware(resolved.local_time, UTC) if resolved and resolved.local_time else None
        ),
        "requested_timezone": (resolved.timezone if resolved else tz_name or ""),
        "dst_policy": policy.value,
        "dst_adjustment": resolved.adjustment.value if resolved else "none",
        "due_at": due,
    }


def _quiet(
    tenant: Tenant, data: dict[str, Any], due_at: datetime, priority: str, *, current: Message | None = None
) -> dict[str, Any]:
    """Quiet hours at scheduling time (scheduling.dispatch.quiet): the window that applies is copied onto the
    message, and a due time inside it moves to the window's end. A reschedule keeps the window the
    message already carries unless the request names a new policy."""
    names_policy = {"quiet_hours", "recipient_timezone"} & data.keys()
    if current is not None and current.quiet_timezone and not names_policy:
        return quiet.quiet_fields(quiet.stored_window(current), due_at)
    try:
        window = quiet.tenant_quiet_window(
            tenant,
            override=quiet.parse_override(data.get("quiet_hours")),
            recipient_timezone=quiet.recipient_zone(data.get("recipient_timezone")),
            priority=priority,
        )
    except quiet.QuietHoursError as exc:
        raise InvalidInput(exc.field, str(exc)) from exc
    return quiet.quiet_fields(window, due_at)


def suppression_error() -> InvalidInput:
    """Acceptance: a recipient on the tenant's suppression list for this sender is a 400 naming `to`
    (counted as stopped at acceptance)."""
    events.opted_out_stopped("acceptance")
    return InvalidInput(
        "to", "the recipient opted out of messages from this sender (suppression list)", reason="suppressed"
    )


def destination_error(refusal: acceptance.Refusal) -> InvalidInput:
    """Acceptance: a destination the tenant may not send to (delivery.guards.destinations: its allowed
    countries, the deny list of premium-rate and high-risk ranges) is a 400 naming `to`."""
    return InvalidInput("to", f"{refusal.message} ({refusal.code})", reason="destination")


def _not_suppressed(tenant: Tenant, to: str, from_number: str, pool: str) -> None:
    if acceptance.is_suppressed(tenant_id=tenant.pk, number=to, from_number=from_number, sender_pool=pool):
        raise suppression_error()


def destination_allowed(tenant: Tenant, to: str) -> None:
    """Acceptance: a destination the tenant may not send to is refused; nothing is stored."""
    refusal = acceptance.destination_refusal(tenant, to)
    if refusal is not None:
        raise destination_error(refusal)


def message_create(
    *, tenant: Tenant, actor: str, data: dict[str, Any], idempotency_key: str | None = None
) -> tuple[Message, bool]:
    """Validate and store a message. Returns (message, created); created is False for an idempotent
    repeat. Raises InvalidInput naming the field, or IdempotencyMismatch (smsgw.domain_errors)."""
    fingerprint = fingerprint_of(data)
    if idempotency_key:
        existing = Message.objects.filter(tenant=tenant, idempotency_key=idempotency_key).first()
        if existing is not None:
            return idempotent_replay(existing, fingerprint), False

    message, resolved = message_build(
        tenant=tenant, data=data, idempotency_key=idempotency_key, fingerprint=fingerprint, now=timezone.now()
    )
    return message_born(tenant=tenant, actor=actor, message=message, resolved=resolved)


def message_born(
    *, tenant: Tenant, actor: str, message: Message, resolved: ResolvedTime | None
) -> tuple[Message, bool]:
    """Store one built message (``message_build``) with its quota booking: (message, True), or the
    replay of the message another request stored first with the same key, (that message, False).
    Raises QuotaExceeded, or IdempotencyMismatch for a raced key with another body."""
    # The booking commits or rolls back with the row: a refused or failed insert books nothing.
    with transaction.atomic() if quotas.has_quota(tenant) else nullcontext():
        births = birth.messages_birth(
            [(message, intent_details(message, resolved))],
            actor=actor,
            now=timezone.now(),
            tenants={tenant.pk: tenant},
            refuse_over_quota=True,
        )
    if births.existing:
        return raced_replay(tenant, message), False
    return message, True


def raced_replay(tenant: Tenant, message: Message) -> Message:
    """A built message whose insert found its key already there: two requests with the same key raced
    and the other one committed first. Its replay (IdempotencyMismatch if the bodies differ)."""
    if not message.idempotency_key:
        raise IntegrityError("a new message collided with an existing one")
    existing = Message.objects.get(tenant=tenant, idempotency_key=message.idempotency_key)
    return idempotent_replay(existing, message.request_fingerprint)


def message_build(
    *,
    tenant: Tenant,
    data: dict[str, Any],
    idempotency_key: str | None,
    fingerprint: str,
    now: datetime,
    checks: bool = True,
    owns: OwnershipCheck | None = None,
) -> tuple[Message, ResolvedTime | None]:
    """The unsaved message a validated request makes (``data``: the create serializer's validated data),
    or InvalidInput naming the field. ``checks``: the acceptance checks that read the database (the
    destination guards and the suppression list); a batch (scheduling.messages.batch) asks them once
    for all its items instead, and ``owns`` asks the sender ownership once per sender."""
    to = _recipient(data["to"])
    encoding, segments = _body(data["body"])
    from_number, pool = _sender(tenant, data.get("from"), data.get(SENDER_POOL_FIELD), owns)
    if checks:
        destination_allowed(tenant, to)
        _not_suppressed(tenant, to, from_number, pool)
    resolved, policy = _time(tenant, data.get("send_at"), data.get("timezone"), data.get("dst_policy"), now)
    time_fields = _time_fields(resolved, data.get("send_at") or "", data.get("timezone") or "", policy, now)
    priority = priority_for(tenant, data.get("priority"), default=Priority.TRANSACTIONAL)
    time_fields.update(_quiet(tenant, data, time_fields["due_at"], priority))
    validity = data.get("validity_seconds") or settings.DEFAULT_VALIDITY_SECONDS
    message = Message(
        tenant=tenant,
        to=to,
        body=data["body"],
        encoding=encoding,
        segments=segments,
        from_number=from_number,
        sender_pool=pool,
        priority=priority,
        metadata=data.get("metadata") or {},
        uncertain_wait_seconds=data.get("uncertain_wait_seconds"),
        status_callback=data.get("status_callback") or "",
        content_retention=data.get("content_retention") or "retain",
        address_retention=data.get("address_retention") or "retain",
        expires_at=time_fields["due_at"] + timedelta(seconds=validity),
        run_after=time_fields["due_at"],
        status=Status.SCHEDULED,
        idempotency_key=idempotency_key or None,
        request_fingerprint=fingerprint,
        **time_fields,
    )
    return message, resolved


def idempotent_replay(existing: Message, fingerprint: str) -> Message:
    if existing.request_fingerprint != fingerprint:
        raise IdempotencyMismatch(
            "This Idempotency-Key was already used with a different request body; "
            "use a new key for a different message."
        )
    return existing


def intent_details(message: Message, resolved: ResolvedTime | None) -> dict[str, Any]:
    details = {
        "requested_send_at": message.requested_send_at or "now",
        "timezone": message.requested_timezone,
        "due_at": message.due_at.isoformat(),
        "expires_at": message.expires_at.isoformat(),
        "segments": message.segments,
        "encoding": message.encoding,
    }
    if resolved is not None:
        details["dst_adjustment"] = resolved.adjustment.value
        if resolved.adjustment.value != "none":
            details["dst_note"] = resolved.describe()
    details.update(quiet.quiet_details(message))
    return details


def message_get(*, tenant: Tenant, public_id: str) -> Message:
    # Tenant in the filter, not a permission check afterwards: another tenant's id is simply not found.
    if public_id.startswith("SM"):  # the message's SID on the Twilio-compatible API (scheduling.facade)
        from scheduling.facade.resources import public_id_of

        public_id = public_id_of(public_id) or public_id
    message = Message.objects.filter(tenant=tenant, public_id=public_id, deleted_at__isnull=True).first()
    if message is None:
        raise NotFoundError("No message with this id.")
    return message


def message_cancel(*, tenant: Tenant, public_id: str, actor: str) -> Message:
    message = message_get(tenant=tenant, public_id=public_id)
    now = timezone.now()
    result = transitions.transition(
        message.pk,
        from_statuses=[Status.SCHEDULED, Status.QUEUED],
        to_status=Status.CANCELLED,
        kind="cancelled",
        actor=actor,
        # The reason it waited (paced, quota_exceeded, held_for_review, ...) no longer applies: the code
        # says why it ended, as the other cancels do (campaign_cancelled, review_cancelled, opted_out).
        set_fields={
            "run_after": None,
            "status_reason": "cancelled by request",
            "reason_code": REASON_CANCELLED,
        },
        now=now,
    )
    if not result.won:
        if result.status == Status.CANCELLED:
            transitions.event_record(message.pk, kind="cancel_repeated", actor=actor, status=result.status)
        else:
            if message.status in (Status.SCHEDULED, Status.QUEUED) or result.status == Status.SENDING:
                # A race the send won (SPEC section 4): the message was cancellable when this request read
                # it, or a send task holds it right now. A cancel of a message sent long ago is no race.
                events.cancel_race("cancel_lost")
            transitions.event_record(
                message.pk,
                kind="cancel_rejected",
                actor=actor,
                status=result.status,
                details={"reason": f"already {result.status}; cancellation is only possible before sending"},
            )
            raise ConflictError(
                f"Too late to cancel: the message is already {result.status}.", current_status=result.status
            )
    message.refresh_from_db()
    return message
