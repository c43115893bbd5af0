"""Status processor: applies stored provider receipts to messages, forward only (with one exception).

Receipts are claimed in batches (FOR UPDATE SKIP LOCKED on PostgreSQL) by a beat-driven loop on the
`receipts` queue, so a burst of callbacks never competes with the send queues. Each receipt either moves
its message, or is kept on the timeline as evidence, or, when its provider id is not stored on any
message yet (a callback that overtook the submit response), waits and is tried again: never dropped.

What each provider status does (the adapter normalises it; Twilio's 13 statuses in
delivery.providers.twilio.callbacks; the rules are one table, delivery.sending.outcomes.RECEIPT_MOVES):

* queued / sending (the provider still holds it) -> a timeline note;
* sent -> ``sent``; delivered (and read) -> ``delivered``; undelivered -> ``undelivered``;
* failed -> by the error table's class for its ErrorCode (``failed`` means the provider never handed it
  on, so a resend cannot duplicate it):
    throttled (30001 queue overflow) or transient -> ``queued`` again (throttled: not charged);
    account fault -> the scope is held (delivery.flow.provider_holds) and the message waits in ``queued``;
    opted out (21610) -> ``failed`` with reason ``opted_out``; permanent -> ``failed``;
* canceled (at the provider) -> ``failed``; inbound statuses -> a note; anything else -> kept raw.

Delivery times come from the carrier's receipt when the provider passes it (Twilio's RawDlrDoneDate),
else from when the callback arrived.

A long message sent through a provider that answers one id per part (``capabilities.per_part_ids``,
Vonage: one ``message-id`` and one receipt per part) is one message with several receipts: each part's
receipt is found by the attempt's ``response["part_ids"]`` (receipts.unknown, PART) and named on the
timeline ("part 2 of 3"). The message is ``delivered`` only once every part has a delivered receipt; a
part that ends otherwise ends the message so (``undelivered``, or ``failed``), never sent again (the other
parts were handed on: a resend would repeat them).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypedDict

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from delivery.flow import provider_holds as holds_service
from delivery.guards import suppression
from delivery.models import Attempt, AttemptOutcome, OptOutSignal
from delivery.providers import get_adapter
from delivery.providers.base import LOOKUP_SOURCE
from delivery.sending import delays, outcomes
from delivery.sending.outcomes import REQUEUE_FROM, Delay
from receipts import unknown
from receipts.models import ReceiptEvent, ReceiptOutcome
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from smsgw.runtime.db import is_postgres

log = logging.getLogger(__name__)

# Forward-only ranks, the one place they are defined. A receipt moves a message only to a higher rank;
# terminal states share the top rank, so the first terminal evidence wins and later ones are recorded.
RANK: dict[str, int] = {
    Status.SCHEDULED: 0,
    Status.QUEUED: 1,
    Status.SENDING: 2,
    Status.SENT: 3,
    Status.DELIVERED: 4,
    Status.UNDELIVERED: 4,
    Status.FAILED: 4,
    Status.CANCELLED: 4,
    Status.EXPIRED: 4,
}
# Normalised provider status -> the message status it proves. queued/sending/inbound are informational.
TARGET = outcomes.RECEIPT_TARGET
STAMP: dict[str, str] = {
    Status.SENT: "sent_at",
    Status.DELIVERED: "delivered_at",
    Status.UNDELIVERED: "failed_at",
    Status.FAILED: "failed_at",
}
# A carrier's done date is trusted only if it is this close to what we know (its zone is not stated).
DONE_AT_TOLERANCE = timedelta(minutes=15)


class MessageRow(TypedDict):
    """What the processor reads of a receipt's message (``_load``); status and version follow the moves
    decided in the batch."""

    id: int
    provider: str
    provider_message_id: str | None
    status: str
    version: int
    tenant_id: int
    to: str
    from_number: str
    messaging_service_sid: str
    attempt_count: int
    provider_calls: int
    due_at: datetime
    expires_at: datetime
    sent_at: datetime | None
    sending_at: datetime | None


def _claim(now: datetime, limit: int) -> list[ReceiptEvent]:
    table = ReceiptEvent._meta.db_table
    lock = " FOR UPDATE SKIP LOCKED" if is_postgres() else ""
    with connection.cursor() as cur:
        cur.execute(
            f'SELECT "id" FROM "{table}" WHERE "processed_at" IS NULL AND "next_try_at" <= %s '  # noqa: S608
            f'ORDER BY "next_try_at" LIMIT %s{lock}',
            [now, limit],
        )
        ids = [r[0] for r in cur.fetchall()]
    return list(ReceiptEvent.objects.filter(pk__in=ids).order_by("received_at", "id"))


def receipts_process_due(*, limit: int | None = None) -> int:
    """Process one batch of due receipts; returns how many were claimed."""
    limit = limit or settings.RECEIPT_BATCH_SIZE
    now = timezone.now()
    with transaction.atomic():
        receipts = _claim(now, limit)
        if not receipts:
            return 0
        _apply(receipts, now)
    return len(receipts)


def _stamp(receipt: ReceiptEvent, msg: MessageRow) -> datetime:
    done = receipt.done_at
    floor = msg.get("sent_at") or msg.get("sending_at")
    if done is None or done > receipt.received_at + DONE_AT_TOLERANCE:  # none, or not plausible
        return receipt.received_at
    if floor is None or done >= floor - DONE_AT_TOLERANCE:
        return max(done, floor) if floor else done
    return receipt.received_at


def _load(keys: set[tuple[str, str]]) -> dict[tuple[str, str | None], MessageRow]:
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
            "messaging_service_sid",
            "attempt_count",
            "provider_calls",
            "due_at",
            "expires_at",
            "sent_at",
            "sending_at",
        )
    }


@dataclass
class _Batch:
    """A claimed batch of receipts as it is worked through: what is finished, what waits, the notes and
    the moves to write."""

    done: list[ReceiptEvent] = field(default_factory=list)
    waiting: list[ReceiptEvent] = field(default_factory=list)
    notes: list[tuple[int | None, str, str, dict]] = field(default_factory=list)
    # (from, to, kind, columns) -> rows: one CAS statement per group, every row naming the same columns
    moves: dict[tuple[str, str, str, tuple[str, ...]], list[tuple[int, int, dict]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    move_receipt: dict[int, ReceiptEvent] = field(default_factory=dict)
    move_details: dict[int, dict] = field(default_factory=dict)
    opt_outs: list[OptOutSignal] = field(default_factory=list)
    provider_failed: list[tuple[str, str, str]] = field(default_factory=list)


def _apply(receipts: list[ReceiptEvent], now: datetime) -> None:
    by_sid = _load({(r.provider, r.provider_message_id) for r in receipts})
    batch = _Batch()
    pending = _match(receipts, by_sid, batch, now)
    # Furthest evidence first within a message, so a shuffled batch lands on the furthest state at once.
    pending.sort(
        key=lambda r: (r.provider_message_id, -RANK.get(TARGET.get(r.normalized_status, ""), -1), r.id)
    )
    for receipt in pending:
        _decide(receipt, by_sid[(receipt.provider, receipt.provider_message_id)], batch, now)
    _write(batch, now)


def _match(
    receipts: list[ReceiptEvent],
    by_sid: dict[tuple[str, str | None], MessageRow],
    batch: _Batch,
    now: datetime,
) -> list[ReceiptEvent]:
    """The receipts whose message is known (``by_sid`` gains those found by their hints); the others
    are recorded as duplicates, superseded, unknown or orphaned, or wait to be tried again."""
    done, waiting, notes = batch.done, batch.waiting, batch.notes
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
            done.append(receipt)
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
            receipt.outcome = (
                ReceiptOutcome.DUPLICATE if verdict == unknown.DUPLICATE else ReceiptOutcome.SUPERSEDED
            )
            notes.append(
                (
                    message_id,
                    "receipt",
                    _status_of(message_id),
                    {
                        **_details(receipt),
                        "note": "receipt for a second submission of this message"
                        if verdict == unknown.DUPLICATE
                        else "receipt for an earlier attempt that failed at the provider",
                    },
                )
            )
            done.append(receipt)
        else:
            age = (now - receipt.received_at).total_seconds()
            if age > settings.RECEIPT_PENDING_MAX_AGE_SECONDS:
                receipt.outcome = ReceiptOutcome.ORPHANED
                done.append(receipt)
            else:
                receipt.next_try_at = now + delays.receipt_retry_delay(receipt.tries)
                waiting.append(receipt)
    if found_sids:
        by_sid.update(_load(found_sids))
    if parts:
        _alias_parts(parts, by_sid, pending, waiting, now)
    return pending


def _alias_parts(
    parts: list[ReceiptEvent],
    by_sid: dict[tuple[str, str | None], MessageRow],
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
        by_sid.update(_load(missing))
    for receipt in parts:
        first = (receipt.provider, recorded.get(receipt.message_id or 0, ""))
        if first in by_sid:
            by_sid[(receipt.provider, receipt.provider_message_id)] = by_sid[first]
        else:  # the message moved on meanwhile: judged again on the next try
            pending.remove(receipt)
            receipt.next_try_at = now + delays.receipt_retry_delay(receipt.tries)
            waiting.append(receipt)


def _parts_of(receipt: ReceiptEvent, msg: MessageRow) -> list[str]:
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


def _all_parts_delivered(provider: str, part_ids: list[str]) -> bool:
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


def _decide(receipt: ReceiptEvent, msg: MessageRow, batch: _Batch, now: datetime) -> None:
    """A known message's receipt: a timeline note, or a move (delivery.sending.outcomes.RECEIPT_MOVES)."""
    receipt.message_id = msg["id"]
    current = msg["status"]
    details = _details(receipt)
    part_ids = _parts_of(receipt, msg)
    if part_ids:
        details["part"] = part_ids.index(receipt.provider_message_id) + 1
        details["parts"] = len(part_ids)
    if receipt.normalized_status == "":
        receipt.outcome = ReceiptOutcome.UNKNOWN_STATUS
        batch.done.append(receipt)
        return
    if msg["id"] in batch.move_receipt:
        note = {**details, "note": "already at or past this status"}
        batch.notes.append((msg["id"], "receipt", current, note))
        receipt.outcome = ReceiptOutcome.RECORDED
        batch.done.append(receipt)
        return
    if (
        part_ids
        and TARGET.get(receipt.normalized_status) == Status.DELIVERED
        and RANK[current] < RANK[Status.DELIVERED]
        and not _all_parts_delivered(receipt.provider, part_ids)
    ):
        waiting = (
            f"part {details['part']} of {len(part_ids)} delivered; the message is delivered when every "
            "part is"
        )
        batch.notes.append((msg["id"], "receipt", current, {**details, "note": waiting}))
        receipt.outcome = ReceiptOutcome.RECORDED
        batch.done.append(receipt)
        return
    effect = _effect(receipt, msg, resend=not part_ids)
    if effect is None:
        why = (
            "informational status"
            if receipt.normalized_status not in TARGET
            else "already at or past this status"
        )
        batch.notes.append((msg["id"], "receipt", current, {**details, "note": why}))
        receipt.outcome = ReceiptOutcome.RECORDED
        batch.done.append(receipt)
        return
    kind, target, values, extra_details = effect
    if receipt.normalized_status in ("failed", "canceled"):
        # The provider never handed this attempt on: it was refused after all, whether the message
        # is sent again or ends failed here.
        batch.provider_failed.append((receipt.provider, receipt.provider_message_id, receipt.error_code))
    if values.get("reason_code") == "opted_out":
        batch.opt_outs.append(
            OptOutSignal(
                tenant_id=msg["tenant_id"],
                to=msg["to"],
                from_number=msg["from_number"],
                messaging_service_sid=msg["messaging_service_sid"],
                provider=receipt.provider,
                error_code=receipt.error_code,
                message_id=msg["id"],
                created_at=now,
            )
        )
    batch.moves[(current, target, kind, tuple(sorted(values)))].append((msg["id"], msg["version"], values))
    batch.move_receipt[msg["id"]] = receipt
    batch.move_details[msg["id"]] = {**details, "source": _source(receipt), **extra_details}
    msg["status"] = target  # later receipts in this batch compare against the new state
    msg["version"] += 1


def _write(batch: _Batch, now: datetime) -> None:
    for (current, target, kind, columns), items in batch.moves.items():
        moved = set(
            transitions.transition_versioned(
                items,
                from_status=current,
                to_status=target,
                kind=kind,
                per_row_columns=columns,
                set_fields={} if target == Status.QUEUED else {"run_after": None},
                details=batch.move_details.get,
                now=now,
            )
        )
        for mid, _, _ in items:
            receipt = batch.move_receipt[mid]
            if mid in moved:
                receipt.outcome = ReceiptOutcome.APPLIED
                batch.done.append(receipt)
            else:  # the message changed under us (another processor, a late submit record): try again
                receipt.next_try_at = now
                batch.waiting.append(receipt)
    for provider, sid, code in batch.provider_failed:
        # The attempt the provider failed stays on record as refused, so later receipts for its sid are
        # told apart from a real second submission (receipts.unknown), even after an operator replay.
        Attempt.objects.filter(provider=provider, provider_message_id=sid).update(
            outcome=AttemptOutcome.REJECTED, provider_code=code
        )
    transitions.events_record_many(
        [(mid, kind, status, details) for mid, kind, status, details in batch.notes if mid is not None],
        now=now,
    )
    if batch.opt_outs:
        OptOutSignal.objects.bulk_create(batch.opt_outs)
        suppression.from_provider_signals(batch.opt_outs)
    for receipt in batch.done:
        receipt.processed_at = now
    ReceiptEvent.objects.bulk_update(batch.done, ["processed_at", "outcome", "message_id", "tries"])
    ReceiptEvent.objects.bulk_update(batch.waiting, ["next_try_at", "tries", "message_id"])


def _source(receipt: ReceiptEvent) -> str:
    """A receipt is the provider's callback, or a status we looked up ourselves (receipts.lookup)."""
    payload = receipt.payload if isinstance(receipt.payload, dict) else {}
    return LOOKUP_SOURCE if payload.get("source") == LOOKUP_SOURCE else "provider receipt"


def _details(receipt: ReceiptEvent) -> dict:
    return {
        **({"source": LOOKUP_SOURCE} if _source(receipt) == LOOKUP_SOURCE else {}),
        "provider_status": receipt.raw_status,
        "error_code": receipt.error_code,
        "receipt_id": receipt.pk,
        "received_at": receipt.received_at.isoformat(),
        **({"done_at": receipt.done_at.isoformat()} if receipt.done_at else {}),
    }


def _effect(
    receipt: ReceiptEvent, msg: MessageRow, *, resend: bool = True
) -> tuple[str, str, dict, dict] | None:
    """(timeline kind, target status, per-row column values, extra details) or None for a note; the
    move is the table's (delivery.sending.outcomes.RECEIPT_MOVES). ``resend`` False (one part of a long
    message): never back to `queued`, the table's move without a resend instead."""
    current = msg["status"]
    if receipt.normalized_status not in TARGET:
        return None
    adapter = get_adapter(receipt.provider)
    canceled = receipt.normalized_status == "canceled"
    info = adapter.classify(receipt.error_code) if receipt.error_code and not canceled else None
    move = outcomes.receipt_move(receipt.normalized_status, info.error_class if info else None)
    assert move is not None  # every status in TARGET has a move for each error class (RECEIPT_MOVES)
    values: dict = {"provider_status": receipt.raw_status, "error_code": receipt.error_code}
    if move.status == Status.QUEUED:  # a resend: only while the provider still had the message
        requeue = _requeue(receipt, msg, info, move, values) if resend and current in REQUEUE_FROM else None
        if requeue is not None:
            return requeue
        move = move.otherwise
        assert move is not None  # every resend move names what happens without one (RECEIPT_MOVES)
    if RANK[move.status] <= RANK[current] or (current, move.status) not in transitions.ALLOWED:
        return None
    values[STAMP[move.status]] = _stamp(receipt, msg)
    if move.reason_code is not None:
        title = f" ({info.title})" if info else ""
        values["reason_code"] = move.reason_code
        values["status_reason"] = (
            "canceled at the provider; never sent"
            if canceled
            else f"provider reported {receipt.raw_status} {receipt.error_code}{title}".strip()[:255]
        )
    return move.kind, move.status, values, {}


def _requeue(
    receipt: ReceiptEvent, msg: MessageRow, info, move: outcomes.Move, values: dict
) -> tuple[str, str, dict, dict] | None:
    """A `failed` the table says to resend: the provider never handed it on (queue overflow, a held
    account, an unknown transient error), so it goes back to `queued`, off the failed sid. None: no
    retry is left (it ends `failed`)."""
    now = timezone.now()
    failed_it = f"provider failed it: {receipt.error_code} ({info.title})"
    if move.delay == Delay.RETRY:
        decision = delays.retry_decide(
            attempt_number=msg["attempt_count"],
            now=now,
            first_due=msg["due_at"],
            expires_at=msg["expires_at"],
        )
        if not decision.retry:
            return None
        run_after, text = decision.run_after, f"{failed_it}; {decision.reason}"[:255]
        assert run_after is not None  # a retry always has its time (delays.retry_decide)
        extra: dict = {"retry_at": run_after.isoformat()}
    elif move.delay == Delay.HOLD:
        hold = holds_service.hold_open_for(
            provider=receipt.provider,
            account=get_adapter(receipt.provider).account,
            info=info,
            error_code=receipt.error_code,
            message=msg,
            now=now,
        )
        run_after, text, extra = hold.park_until(now), hold.describe(), {"hold_id": hold.id}
    else:  # Delay.THROTTLE
        delay = delays.throttle_delay(uncharged_calls=delays.uncharged_calls(msg))
        run_after = min(now + timedelta(seconds=delay), msg["expires_at"])
        text, extra = f"{failed_it}; resending"[:255], {"retry_at": run_after.isoformat()}
    values.update(
        {
            "run_after": run_after,
            "attempt_count": outcomes.attempt_count_after(msg["attempt_count"], move),
            "provider_message_id": None,
            "reason_code": move.reason_code,
            "status_reason": text,
        }
    )
    if not move.charged:
        extra["charged"] = False
    return move.kind, move.status, values, extra


def receipts_process_for(seconds: float, *, idle_sleep: float = 0.05) -> int:
    """Process batches for ``seconds``. A batch that was not full means the processor has caught up, so
    it waits ``idle_sleep`` before the next claim instead of claiming at once the few callbacks that
    arrived meanwhile: under a steady stream (``bench soak``, 200 sends/s) back-to-back claims made
    batches of a handful of receipts, each paying the claim, the message look-up and the writes whole.
    A backlog still runs batch after batch; a receipt waits at most one batch plus ``idle_sleep``."""
    deadline = time.monotonic() + seconds
    limit = settings.RECEIPT_BATCH_SIZE
    total = 0
    while time.monotonic() < deadline:
        n = receipts_process_due(limit=limit)
        total += n
        if n < limit:
            time.sleep(idle_sleep)
    return total
