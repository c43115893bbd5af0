"""Status processor: applies stored provider receipts to messages, forward only.

Receipts are claimed in batches (FOR UPDATE SKIP LOCKED on PostgreSQL) by a beat-driven loop on the
`receipts` queue, so a burst of callbacks never competes with the send queues. Each receipt either moves
its message forward through scheduling.transitions, or is kept on the timeline as evidence, or, when its
provider id is not stored on any message yet (a callback that overtook the submit response), waits and
is tried again: never dropped.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from receipts.models import ReceiptEvent, ReceiptOutcome
from scheduling import transitions
from scheduling.models import Message, Status
from smsgw.db import is_postgres

log = logging.getLogger(__name__)

# Forward-only ranks, the one place they are defined. A receipt moves a message only to a higher rank;
# terminal states share the top rank, so the first terminal evidence wins and later ones are recorded.
RANK = {
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
# Normalised provider status -> the message status it proves. queued/sending are informational.
TARGET = {
    "sent": Status.SENT,
    "delivered": Status.DELIVERED,
    "undelivered": Status.UNDELIVERED,
    "failed": Status.FAILED,
}
STAMP = {
    Status.SENT: "sent_at",
    Status.DELIVERED: "delivered_at",
    Status.UNDELIVERED: "failed_at",
    Status.FAILED: "failed_at",
}


def _retry_delay(tries: int) -> timedelta:
    return timedelta(seconds=min(60.0, 0.5 * 2 ** min(tries, 10)))


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


def _apply(receipts: list[ReceiptEvent], now: datetime) -> None:
    by_sid = {
        (m["provider"], m["provider_message_id"]): m
        for m in Message.objects.filter(
            provider_message_id__in={r.provider_message_id for r in receipts}
        ).values("id", "provider", "provider_message_id", "status", "version")
    }
    # Furthest evidence first within a message, so a shuffled batch lands on the furthest state at once.
    receipts.sort(key=lambda r: (r.provider_message_id, -RANK.get(TARGET.get(r.normalized_status), -1), r.id))
    moves: dict[tuple[str, str], list[tuple[int, int, dict]]] = defaultdict(list)
    move_receipt: dict[int, ReceiptEvent] = {}
    notes: list[tuple[int, str, str, dict]] = []
    done: list[ReceiptEvent] = []
    waiting: list[ReceiptEvent] = []
    for receipt in receipts:
        msg = by_sid.get((receipt.provider, receipt.provider_message_id))
        receipt.tries += 1
        if receipt.normalized_status == "":
            receipt.outcome = ReceiptOutcome.UNKNOWN_STATUS  # kept raw for review; message untouched
            receipt.message_id = msg["id"] if msg else None
            done.append(receipt)
            continue
        if msg is None:
            age = (now - receipt.received_at).total_seconds()
            if age > settings.RECEIPT_PENDING_MAX_AGE_SECONDS:
                receipt.outcome = ReceiptOutcome.ORPHANED
                done.append(receipt)
            else:
                receipt.next_try_at = now + _retry_delay(receipt.tries)
                waiting.append(receipt)
            continue
        receipt.message_id = msg["id"]
        target = TARGET.get(receipt.normalized_status)
        details = {
            "provider_status": receipt.raw_status,
            "error_code": receipt.error_code,
            "receipt_id": receipt.pk,
            "received_at": receipt.received_at.isoformat(),
        }
        current = msg["status"]
        if (
            target
            and RANK[target] > RANK[current]
            and (current, target) in transitions.ALLOWED
            and msg["id"] not in move_receipt
        ):
            moves[(current, target)].append(
                (
                    msg["id"],
                    msg["version"],
                    {
                        "provider_status": receipt.raw_status,
                        "error_code": receipt.error_code,
                        STAMP[target]: receipt.received_at,
                    },
                )
            )
            move_receipt[msg["id"]] = receipt
            msg["status"] = target  # later receipts in this batch compare against the new state
            msg["version"] += 1
        else:
            why = "already at or past this status" if target else "informational status"
            notes.append((msg["id"], "receipt", current, {**details, "note": why}))
            receipt.outcome = ReceiptOutcome.RECORDED
            done.append(receipt)

    for (current, target), items in moves.items():
        columns = sorted({k for _, _, values in items for k in values})
        moved = set(
            transitions.transition_versioned(
                items,
                from_status=current,
                to_status=target,
                kind=target,
                per_row_columns=columns,
                set_fields={"run_after": None},
                details=lambda mid: {
                    "provider_status": move_receipt[mid].raw_status,
                    "error_code": move_receipt[mid].error_code,
                    "receipt_id": move_receipt[mid].pk,
                    "source": "provider receipt",
                },
                now=now,
            )
        )
        for mid, _, _ in items:
            receipt = move_receipt[mid]
            if mid in moved:
                receipt.outcome = ReceiptOutcome.APPLIED
                done.append(receipt)
            else:  # the message changed under us (another processor, a late submit record): try again
                receipt.next_try_at = now
                waiting.append(receipt)
    transitions.events_record_many(notes, now=now)
    for receipt in done:
        receipt.processed_at = now
    ReceiptEvent.objects.bulk_update(done, ["processed_at", "outcome", "message_id", "tries"])
    ReceiptEvent.objects.bulk_update(waiting, ["next_try_at", "tries", "message_id"])


def receipts_process_for(seconds: float, *, idle_sleep: float = 0.05) -> int:
    deadline = time.monotonic() + seconds
    total = 0
    while time.monotonic() < deadline:
        n = receipts_process_due()
        total += n
        if not n:
            time.sleep(idle_sleep)
    return total
