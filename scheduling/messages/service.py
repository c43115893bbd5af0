"""Writes behind the tenant API: create, cancel, edit/reschedule. Views call these and nothing else
writes a message. Status changes go through ``scheduling.lifecycle.transitions``."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from scheduling.dispatch import quiet
from scheduling.lifecycle import transitions
from scheduling.lifecycle.reasons import RECOUNTED_ON_NEW_RECIPIENT, ReasonCode
from scheduling.limits import quotas
from scheduling.messages import acceptance, birth
from scheduling.models import TERMINAL_STATUSES, Message, Priority, Status
from smsgw.config.providers import sender_pool_problem
from smsgw.domain_errors import ConflictError, IdempotencyMismatch, InvalidInput, NotFoundError
from smsgw.models import Tenant
from smsgw.observability import events
from smsgw.tenancy.priority import priority_for
from smsgw.tenancy.senders import OwnershipCheck
from smsgw.values.phone import PhoneNumberError, mask, normalize_e164
from smsgw.values.segments import analyze
from smsgw.values.timeutil import DstPolicy, ResolvedTime, TimeResolutionError, check_window, resolve_send_at

log = logging.getLogger(__name__)

REASON_CANCELLED = ReasonCode.CANCELLED_BY_REQUEST  # after the tenant's (or an operator's) cancel
ALPHANUMERIC_SENDER = re.compile(r"^(?=.*[A-Za-z])[A-Za-z0-9 ]{1,11}$")
EDITABLE_FIELDS = frozenset(
    {
        "to",
        "body",
        "from",
        "messaging_service_sid",
        "send_at",
        "timezone",
        "dst_policy",
        "priority",
        "validity_seconds",
        "metadata",
        "uncertain_wait_seconds",
    }
)


@dataclass(frozen=True)
class Resolved:
    """Validated, normalised request values ready to store."""

    values: dict[str, Any]
    time: ResolvedTime | None


def _recipient(raw: str) -> str:
    try:
        return normalize_e164(raw)
    except PhoneNumberError as exc:
        raise InvalidInput("to", str(exc)) from exc


def _body(body: str) -> tuple[str, int]:
    if not body or not body.strip():
        raise InvalidInput("body", "must not be empty", reason="empty")
    info = analyze(body)
    if info.segments > settings.MAX_SEGMENTS:
        raise InvalidInput(
            "body",
            f"needs {info.segments} {info.encoding} segments; the limit is {settings.MAX_SEGMENTS}",
            reason="too_long",
        )
    return info.encoding, info.segments


def _sender(
    tenant: Tenant, from_number: str | None, service_sid: str | None, owns: OwnershipCheck | None = None
) -> tuple[str, str]:
    """(from, sender pool) of a request, normalised, or the tenant's defaults when it names neither. A
    sender the tenant does not own (smsgw.tenancy.senders) is refused naming its field: every tenant
    sends through the same provider accounts, so a format check alone would let one send as another."""
    owns = owns or OwnershipCheck(tenant)
    if from_number:
        if from_number.startswith("+"):
            try:
                return _owned(owns, "from", normalize_e164(from_number)), ""
            except PhoneNumberError as exc:
                raise InvalidInput("from", str(exc)) from exc
        if not ALPHANUMERIC_SENDER.match(from_number):
            raise InvalidInput(
                "from", "must be an E.164 number or an alphanumeric sender id of 1-11 characters"
            )
        return _owned(owns, "from", from_number), ""
    if service_sid:
        problem = sender_pool_problem(service_sid)  # as the providers declare their pool ids
        if problem:
            raise InvalidInput("messaging_service_sid", problem)
        return "", _owned(owns, "messaging_service_sid", service_sid)
    if tenant.default_from or tenant.messaging_service_sid:
        return tenant.default_from, "" if tenant.default_from else tenant.messaging_service_sid
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
                raise InvalidInput(exc.field, str(exc)) from exc
        return None, dst_policy
    try:
        resolved = resolve_send_at(send_at, tz_name, dst_policy, tenant.default_timezone or "UTC")
    except TimeResolutionError as exc:
        raise InvalidInput(exc.field, str(exc)) from exc
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


def _iana_or_none(name: str) -> str | None:
    """The stored timezone may be an offset taken from an absolute send_at; only a zone name carries over."""
    from smsgw.values.timeutil import parse_timezone

    try:
        parse_timezone(name)
    except TimeResolutionError:
        return None
    return name


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


def _not_suppressed(tenant: Tenant, to: str, from_number: str, service_sid: str) -> None:
    if acceptance.is_suppressed(
        tenant_id=tenant.pk, number=to, from_number=from_number, messaging_service_sid=service_sid
    ):
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
    from_number, service_sid = _sender(tenant, data.get("from"), data.get("messaging_service_sid"), owns)
    if checks:
        destination_allowed(tenant, to)
        _not_suppressed(tenant, to, from_number, service_sid)
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
        messaging_service_sid=service_sid,
        priority=priority,
        metadata=data.get("metadata") or {},
        uncertain_wait_seconds=data.get("uncertain_wait_seconds"),
        status_callback=data.get("status_callback") or "",
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


def _recount_new_recipient(message: Message, changes: dict[str, Any]) -> dict[str, Any]:
    """A new ``to`` on a message the velocity guard already counted, released or holds: it waits again as a
    fresh message from its due time, so the guard counts the new number and holds it over the limit
    (else a number let through, or released after review, could be swapped for any other)."""
    if changes.get("to", message.to) == message.to or message.reason_code not in RECOUNTED_ON_NEW_RECIPIENT:
        return {}
    return {"reason_code": "", "status_reason": "", "run_after": changes.get("due_at", message.due_at)}


def message_update(*, tenant: Tenant, public_id: str, actor: str, data: dict[str, Any]) -> Message:  # noqa: C901
    message = message_get(tenant=tenant, public_id=public_id)
    if message.status != Status.SCHEDULED:
        raise ConflictError(
            f"Only a scheduled message can be changed; this one is {message.status}.",
            current_status=message.status,
        )
    now = timezone.now()
    changes: dict[str, Any] = {}
    if "to" in data:
        changes["to"] = _recipient(data["to"])
        destination_allowed(tenant, changes["to"])
    if "body" in data:
        changes["encoding"], changes["segments"] = _body(data["body"])
        changes["body"] = data["body"]
    if "from" in data or "messaging_service_sid" in data:
        changes["from_number"], changes["messaging_service_sid"] = _sender(
            tenant, data.get("from"), data.get("messaging_service_sid")
        )
    if {"to", "from_number"} & changes.keys():
        _not_suppressed(
            tenant,
            changes.get("to", message.to),
            changes.get("from_number", message.from_number),
            changes.get("messaging_service_sid", message.messaging_service_sid),
        )
    if "priority" in data:
        changes["priority"] = priority_for(tenant, data["priority"], default=message.priority)
    if "metadata" in data:
        changes["metadata"] = data["metadata"]
    if "uncertain_wait_seconds" in data:
        changes["uncertain_wait_seconds"] = data["uncertain_wait_seconds"]
    time_changed = any(k in data for k in ("send_at", "timezone", "dst_policy"))
    validity = data.get("validity_seconds") or int((message.expires_at - message.due_at).total_seconds())
    if time_changed:
        send_at = data.get("send_at", message.requested_send_at)
        tz_name = data["timezone"] if "timezone" in data else _iana_or_none(message.requested_timezone)
        policy = data.get("dst_policy", message.dst_policy)
        resolved, dst_policy = _time(tenant, send_at, tz_name, policy, now)
        changes.update(_time_fields(resolved, send_at or "", tz_name or "", dst_policy, now))
        priority = changes.get("priority", message.priority)
        changes.update(_quiet(tenant, data, changes["due_at"], priority, current=message))
        changes["run_after"] = changes["due_at"]
    if time_changed or "validity_seconds" in data:
        changes["expires_at"] = changes.get("due_at", message.due_at) + timedelta(seconds=validity)
    if not changes:
        return message
    changes.update(_recount_new_recipient(message, changes))
    details: dict[str, Any] = {"changed": sorted(k for k in data if k in EDITABLE_FIELDS)}
    if "due_at" in changes:
        details.update(
            old_due_at=message.due_at.isoformat(),
            new_due_at=changes["due_at"].isoformat(),
            timezone=changes["requested_timezone"],
            dst_adjustment=changes["dst_adjustment"],
        )
        if changes.get("quiet_deferred_from"):
            details["quiet_hours_note"] = quiet.move_note(changes)
    with transaction.atomic():
        result = transitions.transition(
            message.pk,
            from_statuses=[Status.SCHEDULED],
            to_status=Status.SCHEDULED,
            kind="rescheduled" if "due_at" in changes else "edited",
            actor=actor,
            details=details,
            set_fields=changes,
            expected_version=message.version,
            now=now,
        )
        if result.won:
            # Another day or more segments: the booking moves with it (429 if it does not fit there).
            quotas.rebook(
                tenant=tenant,
                old_due=message.due_at,
                old_segments=message.segments,
                new_due=changes.get("due_at", message.due_at),
                new_segments=changes.get("segments", message.segments),
                now=now,
            )
    if not result.won:
        raise ConflictError(
            f"The message changed while this edit was applied; it is now {result.status}.",
            current_status=result.status,
        )
    message.refresh_from_db()
    return message


# A body can be redacted once the message has left the gateway: before, the send worker still needs it.
REDACTABLE = frozenset({Status.SENT, *TERMINAL_STATUSES})


def message_redact(*, tenant: Tenant, public_id: str, actor: str) -> Message:
    """Blank the body of a message that has left the gateway (Twilio's ``update(body="")``); the timeline
    records who did it. ConflictError while it is still to be sent."""
    message = message_get(tenant=tenant, public_id=public_id)
    with transaction.atomic():
        done = Message.objects.filter(pk=message.pk, status__in=REDACTABLE).update(
            body="", updated_at=timezone.now()
        )
        if done:
            transitions.event_record(message.pk, kind="redacted", actor=actor, status=message.status)
    if not done:
        message.refresh_from_db(fields=["status"])
        raise ConflictError(
            f"The body can be redacted once the message has been sent; this one is {message.status}.",
            current_status=message.status,
        )
    message.refresh_from_db()
    return message


def message_delete(*, tenant: Tenant, public_id: str, actor: str) -> None:
    """Twilio's ``delete()`` of a message in a final status: it leaves the tenant's view (its API answers
    404 for it, lists leave it out) and its content is erased (body and metadata blanked, the recipient
    masked), but the row, its timeline and its attempts stay as the audit trail, with a ``deleted`` entry
    naming who deleted it and when; operators still find it in the admin. Not a status change (the
    lifecycle's one writer is not bypassed): a deleted message is already final and stays so.
    ConflictError before it is final: its delivery is not complete."""
    message = message_get(tenant=tenant, public_id=public_id)
    now = timezone.now()
    with transaction.atomic():
        deleted = Message.objects.filter(
            pk=message.pk, status__in=TERMINAL_STATUSES, deleted_at__isnull=True
        ).update(deleted_at=now, body="", metadata={}, to=mask(message.to)[:20], updated_at=now)
        if deleted:
            transitions.event_record(message.pk, kind="deleted", actor=actor, status=message.status)
    if not deleted:
        message.refresh_from_db(fields=["status"])
        raise ConflictError(
            f"A message can be deleted once its delivery is complete; this one is {message.status}.",
            current_status=message.status,
        )
    log.info("message deleted", extra={"message_id": message.public_id, "actor": actor})


def message_replay(*, tenant: Tenant, public_id: str, actor: str) -> Message:
    """Send a dead-lettered (``failed``) message again: ``failed`` -> ``queued`` with a fresh attempt
    budget, published by the next sweep like any released message. A validity window that has run out
    since is granted again from now (the same length as the original one), or the send worker would
    expire the replay at once. Raises ConflictError when the message is not ``failed`` (any more)."""
    message = message_get(tenant=tenant, public_id=public_id)
    if message.reason_code == ReasonCode.QUOTA_EXCEEDED:
        # It failed on the tenant's daily quota (policy "fail"): `queued` is past the quota gate, so a
        # replay would send it over the quota the tenant chose to enforce.
        raise ConflictError(
            "It failed on the tenant's daily quota; a replay would send it past that quota.",
            current_status=message.status,
        )
    now = timezone.now()
    set_fields: dict[str, Any] = {
        "run_after": now,
        "attempt_count": 0,
        "reason_code": "",
        "status_reason": "replayed by an operator",
    }
    details: dict[str, Any] = {
        "previous_reason": message.status_reason[:200],
        "error_code": message.error_code,
    }
    if message.expires_at <= now:
        set_fields["expires_at"] = now + max(message.expires_at - message.due_at, timedelta(minutes=5))
        details["new_expires_at"] = set_fields["expires_at"].isoformat()
    result = transitions.transition(
        message.pk,
        from_statuses=[Status.FAILED],
        to_status=Status.QUEUED,
        kind="replayed",
        actor=actor,
        details=details,
        set_fields=set_fields,
        expected_version=message.version,
        now=now,
    )
    if not result.won:
        raise ConflictError(
            f"Only a failed message can be replayed; this one is {result.status}.",
            current_status=result.status,
        )
    message.refresh_from_db()
    return message
