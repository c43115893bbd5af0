"""Status processor: applies stored provider receipts to messages, forward only (with one exception).

Receipts are claimed in batches (FOR UPDATE SKIP LOCKED on PostgreSQL) by a beat-driven loop on the
`receipts` queue, so a burst of callbacks never competes with the send queues. Each receipt either moves
its message, or is kept on the timeline as evidence, or, when its provider id is not stored on any
message yet (a callback that overtook the submit response), waits and is tried again: never dropped.

What each provider status does (the adapter normalises it; Twilio's 13 statuses in
delivery.providers.twilio.callbacks; the rules are one table, delivery.outcomes.table.RECEIPT_MOVES,
made by the outcome room's mover, delivery.outcomes.mover):

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

import time
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from delivery.models import Attempt, AttemptOutcome
from delivery.outcomes import mover
from delivery.outcomes import table as outcomes
from delivery.outcomes.table import REQUEUE_FROM, Delay
from delivery.providers import get_adapter
from delivery.providers.base import ErrorInfo
from receipts.matching import (
    Batch,
    MessageRow,
    all_parts_delivered,
    messages_load,
    parts_of,
    receipt_details,
    receipt_source,
    receipts_match,
)
from receipts.models import ReceiptEvent, ReceiptOutcome
from scheduling.lifecycle import transitions
from scheduling.models import Status
from smsgw import tracing
from smsgw.observability import events
from smsgw.runtime.db import is_postgres

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
    started = time.time_ns()  # the batch's span, made only for a batch that claimed receipts
    now = timezone.now()
    with transaction.atomic():
        receipts = _claim(now, limit)
        if not receipts:
            return 0
        with tracing.span(
            "receipts process",
            kind=tracing.SpanKind.CONSUMER,
            start_time=started,
            attributes={
                "smsgw.receipts": len(receipts),
                # The provider's references, which a provider request's span names too (the first few).
                "smsgw.provider_message_ids": sorted({r.provider_message_id for r in receipts})[:20],
            },
        ):
            finals = _apply(receipts, now)
    events.receipts_final(finals)  # committed: a batch rolled back counts nothing
    return len(receipts)


def _stamp(receipt: ReceiptEvent, msg: MessageRow) -> datetime:
    done = receipt.done_at
    floor = msg.get("sent_at") or msg.get("sending_at")
    if done is None or done > receipt.received_at + DONE_AT_TOLERANCE:  # none, or not plausible
        return receipt.received_at
    if floor is None or done >= floor - DONE_AT_TOLERANCE:
        return max(done, floor) if floor else done
    return receipt.received_at


def _apply(receipts: list[ReceiptEvent], now: datetime) -> list[tuple]:
    """Apply a claimed batch; returns the final delivery moves it made, for the metrics
    (``events.receipts_final``), to be counted once the batch commits."""
    by_sid = messages_load({(r.provider, r.provider_message_id) for r in receipts})
    tracing.current_links_add(m["trace_context"] for m in by_sid.values())  # each message's own trace
    batch = Batch()
    pending = receipts_match(receipts, by_sid, batch, now)
    # Furthest evidence first within a message, so a shuffled batch lands on the furthest state at once.
    pending.sort(
        key=lambda r: (r.provider_message_id, -RANK.get(TARGET.get(r.normalized_status, ""), -1), r.id)
    )
    for receipt in pending:
        _decide(receipt, by_sid[(receipt.provider, receipt.provider_message_id)], batch, now)
    return _write(batch, now)


def _recorded(receipt: ReceiptEvent, msg: MessageRow, batch: Batch, details: dict, note: str) -> None:
    """A receipt that moves nothing: a note on the message's timeline."""
    batch.notes.append((msg["id"], "receipt", msg["status"], {**details, "note": note}))
    receipt.outcome = ReceiptOutcome.RECORDED
    batch.done.append(receipt)


def _decide(receipt: ReceiptEvent, msg: MessageRow, batch: Batch, now: datetime) -> None:
    """A known message's receipt: a timeline note, or a move (delivery.outcomes.table.RECEIPT_MOVES)."""
    receipt.message_id = msg["id"]
    current = msg["status"]
    details = receipt_details(receipt)
    part_ids = parts_of(receipt, msg)
    if part_ids:
        details["part"] = part_ids.index(receipt.provider_message_id) + 1
        details["parts"] = len(part_ids)
    if receipt.normalized_status == "":
        receipt.outcome = ReceiptOutcome.UNKNOWN_STATUS
        batch.done.append(receipt)
        return
    if msg["id"] in batch.move_receipt:
        _recorded(receipt, msg, batch, details, "already at or past this status")
        return
    if (
        part_ids
        and TARGET.get(receipt.normalized_status) == Status.DELIVERED
        and RANK[current] < RANK[Status.DELIVERED]
        and not all_parts_delivered(receipt.provider, part_ids)
    ):
        waiting = (
            f"part {details['part']} of {len(part_ids)} delivered; the message is delivered when every "
            "part is"
        )
        _recorded(receipt, msg, batch, details, waiting)
        return
    done = _effect(receipt, msg, resend=not part_ids)
    if done is None:
        informational = receipt.normalized_status not in TARGET
        _recorded(
            receipt,
            msg,
            batch,
            details,
            "informational status" if informational else "already at or past this status",
        )
        return
    if receipt.normalized_status in ("failed", "canceled"):
        # The provider never handed this attempt on: it was refused after all, whether the message
        # is sent again or ends failed here.
        batch.provider_failed.append((receipt.provider, receipt.provider_message_id, receipt.error_code))
    if done.move.opt_out:
        batch.moves.opt_out(msg, provider=receipt.provider, error_code=receipt.error_code, now=now)
    details = {**details, "source": receipt_source(receipt), **done.notes}
    batch.moves.add(msg, done.move, from_status=current, columns=done.columns, details=details)
    batch.move_receipt[msg["id"]] = receipt
    batch.due_at[msg["id"]] = msg.get("due_at")
    msg["status"] = done.move.status  # later receipts in this batch compare against the new state
    msg["version"] += 1


def _write(batch: Batch, now: datetime) -> list[tuple]:
    moved = batch.moves.write(now)
    finals = _finals(batch, moved)
    for group, items in batch.moves.rows.items():
        won = set(moved[group])
        for mid, _, _ in items:
            receipt = batch.move_receipt[mid]
            if mid in won:
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
    for receipt in batch.done:
        receipt.processed_at = now
    ReceiptEvent.objects.bulk_update(batch.done, ["processed_at", "outcome", "message_id", "tries"])
    ReceiptEvent.objects.bulk_update(batch.waiting, ["next_try_at", "tries", "message_id"])
    return finals


def _finals(batch: Batch, moved: dict[mover.Group, list[int]]) -> list[tuple]:
    """(provider, status, due_at, stamp) of each move to delivered or undelivered that won its
    compare-and-set: the delivered and undelivered counts and the due-to-delivered latency."""
    finals = []
    for group, items in batch.moves.rows.items():
        if group.to_status not in (Status.DELIVERED, Status.UNDELIVERED):
            continue
        won = set(moved[group])
        for mid, _, columns in items:
            if mid in won:
                receipt = batch.move_receipt[mid]
                stamped = columns.get(STAMP[group.to_status])
                finals.append((receipt.provider, group.to_status, batch.due_at.get(mid), stamped))
    return finals


def _effect(receipt: ReceiptEvent, msg: MessageRow, *, resend: bool = True) -> mover.Step | None:
    """The move the table says (delivery.outcomes.table.RECEIPT_MOVES), or None for a note. ``resend``
    False (one part of a long message): never back to `queued`, the table's move without a resend
    instead."""
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
        assert info is not None  # a resend is by an error code's class
        requeue = _requeue(receipt, msg, info, move, values) if resend and current in REQUEUE_FROM else None
        if requeue is not None:
            return requeue
        move = move.otherwise
        assert move is not None  # every resend move names what happens without one (RECEIPT_MOVES)
    if RANK[move.status] <= RANK[current] or (current, move.status) not in transitions.ALLOWED:
        return None
    title = f" ({info.title})" if info else ""
    text = (
        "canceled at the provider; never sent"
        if canceled
        else f"provider reported {receipt.raw_status} {receipt.error_code}{title}".strip()
    )
    done = mover.step(mover.Wait(move), msg, status_reason=text)
    done.columns.update(values)
    done.columns[STAMP[move.status]] = _stamp(receipt, msg)
    return done


def _requeue(
    receipt: ReceiptEvent, msg: MessageRow, info: ErrorInfo, move: outcomes.Move, values: dict
) -> mover.Step | None:
    """A `failed` the table says to resend: the provider never handed it on (queue overflow, a held
    account, an unknown transient error), so it goes back to `queued`, off the failed sid. None: no
    retry is left (it ends `failed`)."""
    account = get_adapter(receipt.provider).account
    cause = mover.Cause(provider=receipt.provider, account=account, info=info, error_code=receipt.error_code)
    wait = mover.wait_for(move, msg, cause, timezone.now())
    if wait.move is not move:
        return None
    failed_it = f"provider failed it: {receipt.error_code} ({info.title})"
    if wait.hold is not None:
        text = wait.hold.describe()
    elif move.delay == Delay.RETRY:
        text = f"{failed_it}; {wait.decision}"
    else:  # Delay.THROTTLE
        text = f"{failed_it}; resending"
    done = mover.step(wait, msg, status_reason=text)
    done.columns.update(values)
    done.columns["provider_message_id"] = None
    return done


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
