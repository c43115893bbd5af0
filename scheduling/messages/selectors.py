"""Reads behind the tenant API. Every query starts from the tenant."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from django.db.models import QuerySet
from django.utils.dateparse import parse_datetime

from scheduling.messages.service import message_get
from scheduling.models import Message, MessageEvent, Status
from smsgw import stages
from smsgw.channels import DEFAULT_CHANNEL, AddressError
from smsgw.domain_errors import InvalidInput, NotFoundError

MAX_TIMELINE = 1000


def recipient_param(raw: str) -> str:
    """The ``to`` filter, normalised as the ``to`` field is (or a 400 naming ``to``): a filter that can
    never match must not silently answer an empty page."""
    try:
        return DEFAULT_CHANNEL.address_query(raw)
    except AddressError as exc:
        raise InvalidInput("to", str(exc)) from exc


def _instant(params, name: str):
    raw = params.get(name)
    if raw is None:
        return None
    try:
        # ASCII: parse_datetime's fallback pattern reads any Unicode digit (\d) as int() does.
        value = parse_datetime(raw) if raw.isascii() else None
    except ValueError:  # well formed but impossible, e.g. month 13: a 500 before
        value = None
    if value is None or value.tzinfo is None or not instant_in_range(value):
        raise InvalidInput(name, "must be an ISO 8601 time with an offset, e.g. 2026-12-01T09:00:00Z")
    return value


def instant_in_range(value) -> bool:
    """Year 1 with a positive offset (or 9999 with a negative one) is before (after) datetime's range in
    UTC: the database adapter's conversion raised OverflowError (a 500)."""
    try:
        value.astimezone(UTC)
    except OverflowError:
        return False
    return True


def message_lookups(params) -> dict[str, Any]:
    """The list's filters as lookups on the columns the live table and history share (a 400 naming a bad
    one)."""
    lookups: dict[str, Any] = {}
    if params.get("status"):
        statuses = [s.strip() for s in params["status"].split(",") if s.strip()]
        bad = [s for s in statuses if s not in Status.values]
        if bad:
            raise InvalidInput(
                "status", f"unknown status; one of {', '.join(Status.values)}", reason="invalid_choice"
            )
        lookups["status__in"] = statuses
    if params.get("reason_code"):
        codes = [c.strip() for c in params["reason_code"].split(",") if c.strip()]
        if any(len(c) > 32 for c in codes):
            raise InvalidInput("reason_code", "a reason code is at most 32 characters")
        if codes:
            lookups["reason_code__in"] = codes
    if params.get("to"):
        lookups["to"] = recipient_param(params["to"])
    for name, lookup in (
        ("created_after", "created_at__gte"),
        ("created_before", "created_at__lt"),
        ("due_after", "due_at__gte"),
        ("due_before", "due_at__lt"),
    ):
        value = _instant(params, name)
        if value is not None:
            lookups[lookup] = value
    return lookups


def message_list(*, tenant, params) -> QuerySet[Message]:
    # A deleted one is gone for the tenant.
    return Message.objects.filter(tenant=tenant, deleted_at__isnull=True, **message_lookups(params))


def message_read(*, tenant, public_id: str) -> Message:
    """One message for the tenant's reads, wherever it lives: the operational table, else history (an
    unsaved instance with ``history_events``). NotFoundError when neither has it."""
    try:
        return message_get(tenant=tenant, public_id=public_id)
    except NotFoundError:
        if public_id.startswith("SM"):
            from scheduling.facade.resources import public_id_of

            public_id = public_id_of(public_id) or public_id
        found = stages.message_history().message(tenant_id=tenant.pk, public_id=public_id)
        if found is None:
            raise
        return found


def message_page(
    *,
    qs: QuerySet[Message],
    tenant,
    lookups: dict[str, Any],
    before: int | None,
    after: int | None,
    limit: int,
) -> list[Message]:
    """Up to ``limit`` messages from the live table and history together, newest first (``before`` an id,
    or the first page), or the ``limit`` just newer than ``after`` (still returned newest first)."""
    if after is not None:
        live = list(qs.filter(id__gt=after).order_by("id")[:limit])
    else:
        live = list((qs.filter(id__lt=before) if before is not None else qs).order_by("-id")[:limit])
    old = stages.message_history().page(
        tenant_id=tenant.pk, lookups=lookups, before=before, after=after, limit=limit
    )
    merged = sorted(live + old, key=lambda m: m.pk, reverse=after is None)[:limit]
    return sorted(merged, key=lambda m: m.pk, reverse=True)


def message_events(*, message: Message) -> QuerySet[MessageEvent] | list[MessageEvent]:
    moved = getattr(message, "history_events", None)  # a message read back from history
    if moved is not None:
        return moved[:MAX_TIMELINE]
    return message.events.order_by("id")[:MAX_TIMELINE]
