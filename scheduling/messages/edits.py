"""Editing a scheduled message (the tenant API's PATCH, the console's bulk edit): its recipient, body,
sender, priority, metadata, send time, validity. Each changed value is checked as at acceptance
(scheduling.messages.service), and the edit is one compare-and-set that keeps its status, with its quota
booking moved in the same transaction. Only a ``scheduled`` message can be changed."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from scheduling.dispatch import quiet
from scheduling.facade.names import SENDER_POOL_FIELD
from scheduling.lifecycle import transitions
from scheduling.lifecycle.reasons import RECOUNTED_ON_NEW_RECIPIENT
from scheduling.limits import quotas
from scheduling.messages.service import (
    _body,
    _not_suppressed,
    _quiet,
    _recipient,
    _sender,
    _time,
    _time_fields,
    destination_allowed,
    message_get,
)
from scheduling.models import Message, Status
from smsgw.domain_errors import ConflictError
from smsgw.models import Tenant
from smsgw.tenancy.priority import priority_for
from smsgw.values.timeutil import TimeResolutionError

EDITABLE_FIELDS = frozenset(
    {
        "to",
        "body",
        "from",
        SENDER_POOL_FIELD,
        "send_at",
        "timezone",
        "dst_policy",
        "priority",
        "validity_seconds",
        "metadata",
        "uncertain_wait_seconds",
    }
)


def message_update(*, tenant: Tenant, public_id: str, actor: str, data: dict[str, Any]) -> Message:
    message = message_get(tenant=tenant, public_id=public_id)
    if message.exempt_suppression:
        # A keyword's confirmation passes the suppression list: edited, it could carry anything past it.
        raise ConflictError(
            "A keyword's confirmation is sent as it is and cannot be changed.", current_status=message.status
        )
    if message.status != Status.SCHEDULED:
        raise ConflictError(
            f"Only a scheduled message can be changed; this one is {message.status}.",
            current_status=message.status,
        )
    now = timezone.now()
    changes = _content_changes(tenant, message, data)
    changes.update(_time_changes(tenant, message, data, changes.get("priority", message.priority), now))
    if not changes:
        return message
    changes.update(_recount_new_recipient(message, changes))
    return _edit_apply(tenant, message, actor, data, changes, now)


def _content_changes(tenant: Tenant, message: Message, data: dict[str, Any]) -> dict[str, Any]:
    """The recipient, body, sender, priority and metadata the edit names, checked as at acceptance."""
    changes: dict[str, Any] = {}
    if "to" in data:
        changes["to"] = _recipient(data["to"])
        destination_allowed(tenant, changes["to"])
    if "body" in data:
        changes["encoding"], changes["segments"] = _body(data["body"])
        changes["body"] = data["body"]
    if "from" in data or SENDER_POOL_FIELD in data:
        changes["from_number"], changes["sender_pool"] = _sender(
            tenant, data.get("from"), data.get(SENDER_POOL_FIELD)
        )
    if {"to", "from_number"} & changes.keys():
        _not_suppressed(
            tenant,
            changes.get("to", message.to),
            changes.get("from_number", message.from_number),
            changes.get("sender_pool", message.sender_pool),
        )
    if "priority" in data:
        changes["priority"] = priority_for(tenant, data["priority"], default=message.priority)
    if "metadata" in data:
        changes["metadata"] = data["metadata"]
    if "uncertain_wait_seconds" in data:
        changes["uncertain_wait_seconds"] = data["uncertain_wait_seconds"]
    return changes


def _time_changes(
    tenant: Tenant, message: Message, data: dict[str, Any], priority: str, now: datetime
) -> dict[str, Any]:
    """A new send time (resolved again, quiet hours applied at ``priority``) and validity."""
    changes: dict[str, Any] = {}
    time_changed = any(k in data for k in ("send_at", "timezone", "dst_policy"))
    validity = data.get("validity_seconds") or int((message.expires_at - message.due_at).total_seconds())
    if time_changed:
        send_at = data.get("send_at", message.requested_send_at)
        tz_name = data["timezone"] if "timezone" in data else _iana_or_none(message.requested_timezone)
        policy = data.get("dst_policy", message.dst_policy)
        resolved, dst_policy = _time(tenant, send_at, tz_name, policy, now)
        changes.update(_time_fields(resolved, send_at or "", tz_name or "", dst_policy, now))
        changes.update(_quiet(tenant, data, changes["due_at"], priority, current=message))
        changes["run_after"] = changes["due_at"]
    if time_changed or "validity_seconds" in data:
        changes["expires_at"] = changes.get("due_at", message.due_at) + timedelta(seconds=validity)
    return changes


def _iana_or_none(name: str) -> str | None:
    """The stored timezone may be an offset taken from an absolute send_at; only a zone name carries over."""
    from smsgw.values.timeutil import parse_timezone

    try:
        parse_timezone(name)
    except TimeResolutionError:
        return None
    return name


def _recount_new_recipient(message: Message, changes: dict[str, Any]) -> dict[str, Any]:
    """A new ``to`` on a message the velocity guard already counted, released or holds: it waits again as a
    fresh message from its due time, so the guard counts the new number and holds it over the limit
    (else a number let through, or released after review, could be swapped for any other)."""
    if changes.get("to", message.to) == message.to or message.reason_code not in RECOUNTED_ON_NEW_RECIPIENT:
        return {}
    return {"reason_code": "", "status_reason": "", "run_after": changes.get("due_at", message.due_at)}


def _edit_apply(
    tenant: Tenant, message: Message, actor: str, data: dict[str, Any], changes: dict[str, Any], now: datetime
) -> Message:
    """The edit as one compare-and-set on the version read (``rescheduled`` when the due time moved, else
    ``edited``), with the quota booking moved in the same transaction."""
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
