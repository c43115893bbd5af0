"""Correcting a dead-lettered (``failed``) message before it is replayed (docs/admin.md, "Correcting a
failed message"): its body, its sender, or its route taken again by today's routing rules (say, after
an operator moved a rule off a failing provider). Each value is checked as at acceptance
(scheduling.messages.service), and the correction is one compare-and-set that keeps the status
(``failed`` -> ``failed``, timeline entry ``corrected`` with what changed, never the body itself), with
its quota booking resized in the same transaction. The replay is then the usual one
(scheduling.messages.final.message_replay)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from scheduling.lifecycle import transitions
from scheduling.limits import quotas
from scheduling.messages.service import _body, _not_suppressed, _sender, message_get
from scheduling.models import Message, Status
from smsgw import stages
from smsgw.domain_errors import ConflictError
from smsgw.models import Tenant

ROUTE_FIELDS = ("provider", "route", "route_plan", "route_leg", "from_number", "sender_pool")


def _route_of(message: Message) -> str:
    return f"{message.route or 'default'} ({message.provider})"


def _routed_again(message: Message, changes: dict[str, Any]) -> dict[str, Any]:
    """The route fields the message gets from today's rules, with ``changes`` applied (a new sender
    changes which legs it may take): as a birth routes it (smsgw.stages.router)."""
    probe = Message(**{f.attname: getattr(message, f.attname) for f in Message._meta.concrete_fields})
    for name, value in changes.items():
        setattr(probe, name, value)
    probe.provider, probe.route, probe.route_plan, probe.route_leg = settings.SMSGW_PROVIDER, "", [], 0
    stages.router()([(probe, {})])
    return {
        name: getattr(probe, name) for name in ROUTE_FIELDS if getattr(probe, name) != getattr(message, name)
    }


def _changes(tenant: Tenant, message: Message, data: dict[str, Any]) -> dict[str, Any]:
    """The columns the correction sets, each checked as at acceptance."""
    changes: dict[str, Any] = {}
    if "body" in data and data["body"] != message.body:
        changes["encoding"], changes["segments"] = _body(data["body"])
        changes["body"] = data["body"]
    if "from" in data:
        from_number, pool = _sender(tenant, data["from"] or None, None)
        if (from_number, pool) != (message.from_number, message.sender_pool):
            _not_suppressed(tenant, message.to, from_number, pool)
            changes["from_number"], changes["sender_pool"] = from_number, pool
    if data.get("reroute") or "from_number" in changes:
        changes.update(_routed_again(message, changes))
    return changes


def _details(message: Message, changes: dict[str, Any]) -> dict[str, Any]:
    """The timeline entry's details: what changed, from what to what (never the body itself)."""
    moved = {"provider", "route", "route_plan"} & changes.keys()
    sender = "from_number" in changes or "sender_pool" in changes
    details: dict[str, Any] = {
        "changed": [
            name for name, yes in (("body", "body" in changes), ("from", sender), ("route", moved)) if yes
        ]
    }
    if "segments" in changes:
        details.update(old_segments=message.segments, new_segments=changes["segments"])
    if sender:
        details.update(
            old_from=message.from_number or message.sender_pool,
            new_from=changes.get("from_number", message.from_number) or changes.get("sender_pool", ""),
        )
    if moved:
        after = Message(
            provider=changes.get("provider", message.provider), route=changes.get("route", message.route)
        )
        details.update(old_route=_route_of(message), new_route=_route_of(after))
    return details


def message_correct(*, tenant: Tenant, public_id: str, actor: str, data: dict[str, Any]) -> Message:
    """``data``: any of ``body``, ``from`` (a sender the tenant owns; blank for its default) and
    ``reroute`` (true: take the route again by today's rules). Raises InvalidInput naming the field, or
    ConflictError when the message is not ``failed`` (any more)."""
    message = message_get(tenant=tenant, public_id=public_id)
    if message.exempt_suppression:
        raise ConflictError(
            "A keyword's confirmation is sent as it is and cannot be changed.", current_status=message.status
        )
    if message.status != Status.FAILED:
        raise ConflictError(
            f"Only a failed message can be corrected before its replay; this one is {message.status}.",
            current_status=message.status,
        )
    changes = _changes(tenant, message, data)
    if not changes:
        return message
    details = _details(message, changes)
    now = timezone.now()
    with transaction.atomic():
        result = transitions.transition(
            message.pk,
            from_statuses=[Status.FAILED],
            to_status=Status.FAILED,
            kind="corrected",
            actor=actor,
            details=details,
            set_fields=changes,
            expected_version=message.version,
            now=now,
        )
        if result.won and "segments" in changes:
            quotas.rebook(
                tenant=tenant,
                old_due=message.due_at,
                old_segments=message.segments,
                new_due=message.due_at,
                new_segments=changes["segments"],
                now=now,
            )
    if not result.won:
        raise ConflictError(
            f"The message changed while this correction was applied; it is now {result.status}.",
            current_status=result.status,
        )
    message.refresh_from_db()
    return message


__all__ = ["message_correct"]
