"""Reads behind the inbound API. Every query starts from the tenant."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import F, Q, QuerySet
from django.db.models.functions import Coalesce
from django.utils.dateparse import parse_datetime

from inbound.models import InboundMessage, InboundState
from scheduling.messages.selectors import recipient_param
from scheduling.models import Message
from smsgw.domain_errors import InvalidInput, NotFoundError

TIME_HELP = "must be an ISO 8601 time with an offset, e.g. 2026-12-01T09:00:00Z"


def instant(params, name: str) -> datetime | None:
    raw = params.get(name)
    if raw is None:
        return None
    try:
        value = parse_datetime(raw) if raw.isascii() and len(raw) <= 40 else None
    except ValueError:
        value = None
    if value is None or value.tzinfo is None or not 1 < value.year < 9999:
        raise InvalidInput(name, TIME_HELP)
    return value


def _number(params, name: str) -> str | None:
    raw = params.get(name)
    if raw is None:
        return None
    try:
        return recipient_param(raw)
    except InvalidInput as exc:
        raise InvalidInput(name, str(exc)) from None


def inbound_list(*, tenant, params) -> QuerySet[InboundMessage]:
    """The tenant's received messages, newest first: filters ``from`` (the contact), ``to`` (our number),
    ``received_after`` / ``received_before`` (400 naming a bad one)."""
    lookups: dict[str, Any] = {}
    contact, ours = _number(params, "from"), _number(params, "to")
    if contact:
        lookups["from_number"] = contact
    if ours:
        lookups["to_number"] = ours
    after, before = instant(params, "received_after"), instant(params, "received_before")
    if after:
        lookups["received_at__gte"] = after
    if before:
        lookups["received_at__lt"] = before
    return InboundMessage.objects.filter(tenant=tenant, state=InboundState.ROUTED, **lookups)


def inbound_get(*, tenant, public_id: str) -> InboundMessage:
    found = InboundMessage.objects.filter(
        tenant=tenant, public_id=public_id, state=InboundState.ROUTED
    ).first()
    if found is None:
        raise NotFoundError("No inbound message with this id.")
    return found


# --- conversations: one number pair's outbound and inbound messages, oldest first ----------------------
@dataclass(frozen=True)
class Item:
    at: datetime
    direction: str  # "outbound" | "inbound"
    id: int
    public_id: str
    from_number: str
    to_number: str
    body: str
    status: str


_CURSOR = re.compile(r"(\d{1,19})\.(\d{1,6})\.([oi])\.(\d{1,19})")
INVALID_CURSOR = "invalid cursor: use the next link of a page as given"


def cursor_encode(item: Item) -> str:
    seconds = int(item.at.timestamp())
    text = f"{seconds}.{item.at.microsecond}.{item.direction[0]}.{item.id}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _cursor_decode(raw: str | None) -> tuple[datetime, str, int] | None:
    if raw is None:
        return None
    try:
        text = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode("ascii") if len(raw) <= 80 else ""
    except (binascii.Error, UnicodeError, ValueError):
        text = ""
    found = _CURSOR.fullmatch(text)
    if not found:
        raise InvalidInput("cursor", INVALID_CURSOR)
    seconds, micro, kind, pk = found.groups()
    try:
        at = datetime.fromtimestamp(int(seconds), UTC).replace(microsecond=int(micro))
    except (OverflowError, OSError, ValueError):
        raise InvalidInput("cursor", INVALID_CURSOR) from None
    return at, kind, int(pk)


def _sent_at(lookup: str, value: datetime) -> Q:
    """An outbound message's time in the conversation (sent, else due) compared with ``value``."""
    return Q(**{f"sent_at__{lookup}": value}) | Q(sent_at__isnull=True, **{f"due_at__{lookup}": value})


def conversation_page(
    *, tenant, contact_raw: str, params, size: int, outbound: bool = True
) -> tuple[list[Item], str | None]:
    """One page (``size`` items, oldest first) of the number pair's messages, and the next page's cursor.
    ``contact_raw``: the contact's number (the path's ``{to}``); ``from``: one of our numbers, to narrow
    to one pair (else every number of the tenant with that contact); ``since``: where to start."""
    try:
        contact = recipient_param(contact_raw)
    except InvalidInput as exc:
        raise InvalidInput("to", str(exc)) from None
    ours = _number(params, "from")
    since = instant(params, "since")
    after = _cursor_decode(params.get("cursor"))
    sent = Message.objects.filter(tenant=tenant, to=contact, deleted_at__isnull=True).annotate(
        at=Coalesce(F("sent_at"), F("due_at"))
    )
    if not outbound:
        sent = sent.none()
    inbound = InboundMessage.objects.filter(
        tenant=tenant, from_number=contact, state=InboundState.ROUTED
    ).annotate(at=F("received_at"))
    if ours:
        sent = sent.filter(Q(from_number=ours) | Q(sender_pool=ours))
        inbound = inbound.filter(Q(to_number=ours) | Q(sender_pool=ours))
    # Compared on the columns, never on the annotation: SQLite compares an annotation with a parameter
    # as text in another form, which let a page repeat the last item of the one before.
    if since:
        sent, inbound = sent.filter(_sent_at("gte", since)), inbound.filter(received_at__gte=since)
    if after:
        at, kind, pk = after
        # (at, direction, id) ascending; "i" (inbound) sorts before "o" (outbound) at the same instant.
        sent = sent.filter(_sent_at("gt", at) | (_sent_at("exact", at) & Q(pk__gt=pk if kind == "o" else 0)))
        later = Q(received_at__gt=at)
        inbound = inbound.filter(later | Q(received_at=at, pk__gt=pk) if kind == "i" else later)
    items = [
        Item(
            m["at"],
            "outbound",
            m["pk"],
            m["public_id"],
            m["from_number"] or m["sender_pool"],
            m["to"],
            m["body"],
            m["status"],
        )
        for m in sent.order_by("at", "pk").values(
            "at", "pk", "public_id", "from_number", "sender_pool", "to", "body", "status"
        )[: size + 1]
    ] + [
        Item(
            m["at"],
            "inbound",
            m["pk"],
            m["public_id"],
            m["from_number"],
            m["to_number"],
            m["body"],
            "received",
        )
        for m in inbound.order_by("at", "pk").values(
            "at", "pk", "public_id", "from_number", "to_number", "body"
        )[: size + 1]
    ]
    items.sort(key=lambda i: (i.at, i.direction != "inbound", i.id))
    page = items[:size]
    return page, cursor_encode(page[-1]) if len(items) > size else None
