"""Which message a claimed receipt is for (receipts.processor): found by its provider id, or by the hints
a signed callback carries (receipts.unknown) when its id is not stored on any message yet; one part's
receipt of a long message shares that message's row. The others are recorded as duplicates, superseded,
unknown or orphaned, or wait to be tried again: never dropped."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypedDict

from django.conf import settings
from django.db.models import Q

from delivery.models import Attempt
from delivery.outcomes import delays
from delivery.outcomes.mover import Moves
from delivery.providers import get_adapter
from delivery.providers.base import LOOKUP_SOURCE
from receipts import unknown
from receipts.models import ReceiptEvent, ReceiptOutcome
from scheduling.models import Message
from smsgw.values.timeutil import utc_text


class MessageRow(TypedDict):
    """What the processor reads of a receipt's message (``messages_load``); status and version follow the
    moves decided in the batch."""

    id: int
    provider: str
    provider_message_id: str | None
    status: str
    version: int
    tenant_id: int
    to: str
    from_number: str
    sender_pool: str
    attempt_count: int
    provider_calls: int
    due_at: datetime
    expires_at: datetime
    sent_at: datetime | None
    sending_at: datetime | None
    trace_context: str  # its trace (smsgw.tracing): the receipt batch's span links to it


BySid = dict[tuple[str, str | None], MessageRow]


@dataclass
class Batch:
    """A claimed batch of receipts as it is worked through: what is finished, what waits, the notes, and
    the moves to make (delivery.outcomes.mover) with the receipt behind each."""

    done: list[ReceiptEvent] = field(default_factory=list)
    waiting: list[ReceiptEvent] = field(default_factory=list)
    notes: list[tuple[int | None, str, str, dict]] = field(default_factory=list)
    moves: Moves = field(default_factory=Moves)
    move_receipt: dict[int, ReceiptEvent] = field(default_factory=dict)
    # A moved message's due time, for the due-to-delivered latency (smsgw.observability.events).
    due_at: dict[int, datetime | None] = field(default_factory=dict)
    provider_failed: list[tuple[str, str, str]] = field(default_factory=list)


def messages_load(keys: set[tuple[str, str]]) -> BySid:
    """The messages the providers' ids name, by (provider, id): one probe of ``msg_provider_sid_unique``
    (provider_message_id, provider) an id. When that index led with the provider, PostgreSQL walked the
    provider's whole part of it for every id (1.2 ms an id with 36,000 messages, growing with the table;
    the top statement on PostgreSQL's CPU under `bench soak`)."""
    by_provider: dict[str, set[str]] = defaultdict(set)
    for provider, sid in keys:
        if sid:
            by_provider[provider].add(sid)
    if not by_provider:
        return {}
    named = Q()
    for provider, sids in by_provider.items():
        named |= Q(provider=provider, provider_message_id__in=sids)
    return {
        (m["provider"], m["provider_message_id"]): m
        for m in Message.objects.filter(named).values(
            "id",
            "provider",
            "provider_message_id",
            "status",
            "version",
            "tenant_id",
            "to",
            "from_number",
            "sender_pool",
            "attempt_count",
            "provider_calls",
            "due_at",
            "expires_at",
            "sent_at",
            "sending_at",
            "trace_context",  # the receipt batch's span links to the message's trace (smsgw.tracing)
        )
    }


def receipts_match(
    receipts: list[ReceiptEvent], by_sid: BySid, batch: Batch, now: datetime
) -> list[ReceiptEvent]:
    """The receipts whose message is known (``by_sid`` gains those found by their hints); the others
    are recorded as duplicates, superseded, unknown or orphaned, or wait to be tried again."""
    found_sids: set[tuple[str, str]] = set()
    parts: list[ReceiptEvent] = []  # another part's receipt of a message we know
    pending: list[ReceiptEvent] = []
    for receipt in receipts:
        receipt.tries += 1
        if (receipt.provider, receipt.provider_message_id) in by_sid:
            pending.append(receipt)
            continue
        if receipt.normalized_status == "":
            receipt.outcome = ReceiptOutcome.UNKNOWN_STATUS  # kept raw for review
            batch.done.append(receipt)
            continue
        verdict, message_id = unknown.unknown_sid_resolve(receipt, now)
        receipt.message_id = message_id
        if verdict == unknown.FOUND:
            found_sids.add((receipt.provider, receipt.provider_message_id))
            pending.append(receipt)
        elif verdict == unknown.PART:
            parts.append(receipt)
            pending.append(receipt)
        elif verdict in (unknown.DUPLICATE, unknown.SUPERSEDED):
            _stray_note(receipt, verdict, message_id, batch)
        else:
            _unknown_wait(receipt, batch, now)
    if found_sids:
        by_sid.update(messages_load(found_sids))
    if parts:
        _alias_parts(parts, by_sid, pending, batch.waiting, now)
    return pending


def _stray_note(receipt: ReceiptEvent, verdict: str, message_id: int | None, batch: Batch) -> None:
    """A receipt for another submission of a known message: kept on its timeline, moving nothing."""
    receipt.outcome = ReceiptOutcome.DUPLICATE if verdict == unknown.DUPLICATE else ReceiptOutcome.SUPERSEDED
    batch.notes.append(
        (
            message_id,
            "receipt",
            _status_of(message_id),
            {
                **receipt_details(receipt),
                "note": "receipt for a second submission of this message"
                if verdict == unknown.DUPLICATE
                else "receipt for an earlier attempt that failed at the provider",
            },
        )
    )
    batch.done.append(receipt)


def _unknown_wait(receipt: ReceiptEvent, batch: Batch, now: datetime) -> None:
    """No message is known for it yet (a callback that overtook the submit record): tried again, until it
    is too old to be any message's."""
    age = (now - receipt.received_at).total_seconds()
    if age > settings.RECEIPT_PENDING_MAX_AGE_SECONDS:
        receipt.outcome = ReceiptOutcome.ORPHANED
        batch.done.append(receipt)
    else:
        receipt.next_try_at = now + delays.receipt_retry_delay(receipt.tries)
        batch.waiting.append(receipt)


def _alias_parts(
    parts: list[ReceiptEvent],
    by_sid: BySid,
    pending: list[ReceiptEvent],
    waiting: list[ReceiptEvent],
    now: datetime,
) -> None:
    """A part's receipt shares its message's row (one dict, so the batch's moves are seen by both)."""
    recorded: dict[int, str] = {
        pk: sid or ""
        for pk, sid in Message.objects.filter(pk__in={r.message_id for r in parts}).values_list(
            "id", "provider_message_id"
        )
    }
    missing = {(r.provider, recorded.get(r.message_id or 0, "")) for r in parts} - by_sid.keys()
    if missing:
        by_sid.update(messages_load(missing))
    for receipt in parts:
        first = (receipt.provider, recorded.get(receipt.message_id or 0, ""))
        if first in by_sid:
            by_sid[(receipt.provider, receipt.provider_message_id)] = by_sid[first]
        else:  # the message moved on meanwhile: judged again on the next try
            pending.remove(receipt)
            receipt.next_try_at = now + delays.receipt_retry_delay(receipt.tries)
            waiting.append(receipt)


def parts_of(receipt: ReceiptEvent, msg: MessageRow) -> list[str]:
    """The part ids of the submission the message records, when it has more than one part (a provider
    with ``capabilities.per_part_ids``); else []."""
    if not msg["provider_message_id"] or not get_adapter(receipt.provider).capabilities.per_part_ids:
        return []
    attempt = (
        Attempt.objects.filter(message_id=msg["id"], provider_message_id=msg["provider_message_id"])
        .order_by("-number")
        .first()
    )
    ids = unknown.part_ids(attempt) if attempt is not None else []
    return ids if len(ids) > 1 and receipt.provider_message_id in ids else []


def all_parts_delivered(provider: str, part_ids: list[str]) -> bool:
    """Has every part a delivered receipt (stored: the batch's own receipts are stored rows too)?"""
    delivered = set(
        ReceiptEvent.objects.filter(
            provider=provider, provider_message_id__in=part_ids, normalized_status="delivered"
        ).values_list("provider_message_id", flat=True)
    )
    return delivered >= set(part_ids)


def _status_of(message_id: int | None) -> str:
    if message_id is None:  # filter(pk=None) matches no row
        return ""
    return Message.objects.filter(pk=message_id).values_list("status", flat=True).first() or ""


def receipt_source(receipt: ReceiptEvent) -> str:
    """A receipt is the provider's callback, or a status we looked up ourselves (receipts.lookup)."""
    payload = receipt.payload if isinstance(receipt.payload, dict) else {}
    return LOOKUP_SOURCE if payload.get("source") == LOOKUP_SOURCE else "provider receipt"


def receipt_details(receipt: ReceiptEvent) -> dict:
    """What a timeline entry says of the receipt behind it."""
    return {
        **({"source": LOOKUP_SOURCE} if receipt_source(receipt) == LOOKUP_SOURCE else {}),
        "provider_status": receipt.raw_status,
        "error_code": receipt.error_code,
        "receipt_id": receipt.pk,
        "received_at": utc_text(receipt.received_at),
        **({"done_at": utc_text(receipt.done_at)} if receipt.done_at else {}),
    }
