"""Receipts for a sid no message has recorded: evidence of a submission we lost track of.

Every submission's StatusCallback URL carries its message and attempt (``?m=<id>&a=<n>``), and the
provider signs the full URL, so such a receipt names its message authentically. What it means depends on
where that message is:

* the message is ``sending`` and the named attempt is still pending: the callback overtook the submit
  response -> wait, the response will record the sid;
* the named attempt is uncertain (we gave up waiting) -> the provider has it: the message is sent, with
  this sid (``reconciled_found``, source: receipt). No resend can follow;
* a resend is queued (reconciliation found nothing) but not yet sent -> the earlier attempt did reach the
  provider after all: the message is recorded as sent instead of sending a second copy;
* the message already has another sid -> the provider holds two submissions of one message: a
  ``DuplicateSubmission`` row (admin) and a ``duplicate_submission`` timeline entry, and an ERROR log;
* the sid belongs to an earlier attempt of the message (failed at the provider, then resent) -> a
  receipt for a superseded attempt: kept on the timeline, the message is not moved;
* the sid is another part of the attempt the message records (a provider that answers one id per part
  of a long message, ``capabilities.per_part_ids``, e.g. Vonage's ``messages[]``; the attempt's
  ``response["part_ids"]``) -> a receipt of that message (PART), not a second submission.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import IntegrityError, transaction

from delivery.models import Attempt, AttemptOutcome, DuplicateSubmission
from delivery.sending.verdicts import found_record
from receipts.models import ReceiptEvent
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status

log = logging.getLogger(__name__)

WAIT, FOUND, DUPLICATE, SUPERSEDED, UNRESOLVED = "wait", "found", "duplicate", "superseded", "unresolved"
PART = "part"


def part_ids(attempt: Attempt) -> list[str]:
    """Every part's provider id of an accepted attempt (the adapter's ``response["part_ids"]``, first part
    first); empty when the provider answers one id per message."""
    ids = (attempt.response or {}).get("part_ids") if isinstance(attempt.response, dict) else None
    return [str(i) for i in ids] if isinstance(ids, list) else []


def unknown_sid_resolve(receipt: ReceiptEvent, now: datetime) -> tuple[str, int | None]:
    """(verdict, message id). FOUND means the message now carries the receipt's sid."""
    if not receipt.message_hint:
        return UNRESOLVED, None
    msg = Message.objects.filter(public_id=f"msg_{receipt.message_hint}").first()
    if msg is None:
        return UNRESOLVED, None
    sid = receipt.provider_message_id
    if DuplicateSubmission.objects.filter(provider=receipt.provider, provider_message_id=sid).exists():
        return DUPLICATE, msg.pk
    attempts = {a.number: a for a in msg.attempts.all()}
    owner = next((a for a in attempts.values() if a.provider_message_id == sid or sid in part_ids(a)), None)
    if owner is not None and owner.provider_message_id != sid and _is_part(owner, msg):
        return PART, msg.pk  # another part of the submission the message records
    if owner is not None:
        if owner.outcome == AttemptOutcome.REJECTED:
            return SUPERSEDED, msg.pk  # it failed at the provider and the message was sent again
        if msg.provider_message_id and msg.provider_message_id != sid:
            return _duplicate(receipt, msg, owner, now), msg.pk  # accepted, but another copy won
        return WAIT, msg.pk
    if msg.provider_message_id:
        return _duplicate(receipt, msg, attempts.get(receipt.attempt_hint or -1), now), msg.pk
    attempt = attempts.get(receipt.attempt_hint or -1)
    if attempt is None:
        return UNRESOLVED, msg.pk
    latest = attempts[max(attempts)]
    if msg.status == Status.SENDING and latest.outcome == AttemptOutcome.PENDING:
        return WAIT, msg.pk  # a submit response is still on its way and will record its sid
    if msg.status in (Status.SENDING, Status.QUEUED):
        return (FOUND if _found(receipt, msg, attempt, now) else WAIT), msg.pk
    return UNRESOLVED, msg.pk


def _is_part(attempt: Attempt, msg: Message) -> bool:
    """A part of the accepted attempt whose first part the message records (a part of any other attempt
    is judged as that attempt: superseded, or a duplicate)."""
    return (
        attempt.outcome != AttemptOutcome.REJECTED
        and bool(attempt.provider_message_id)
        and attempt.provider_message_id == msg.provider_message_id
    )


def _found(receipt: ReceiptEvent, msg: Message, attempt: Attempt, now: datetime) -> bool:
    late = msg.status == Status.QUEUED
    return found_record(
        msg,
        attempt,
        provider_message_id=receipt.provider_message_id,
        provider_status=receipt.raw_status,
        sent_at=max(attempt.started_at, msg.due_at),
        details={
            "attempt": attempt.number,
            "source": "receipt",
            "evidence": "provider receipt for an unrecorded sid (signed callback URL)",
            "decision": (
                "an attempt judged absent did reach the provider: the queued resend is called off"
                if late
                else "the provider has this submission: recorded as sent, not sent again"
            ),
            "receipt_id": receipt.pk,
        },
        now=now,
    )


def _duplicate(receipt: ReceiptEvent, msg: Message, attempt: Attempt | None, now: datetime) -> str:
    details = {
        "provider_message_id": receipt.provider_message_id,
        "recorded_provider_message_id": msg.provider_message_id,
        "attempt": receipt.attempt_hint,
        "attempt_outcome": attempt.outcome if attempt else None,
        "receipt_id": receipt.pk,
        "provider_status": receipt.raw_status,
    }
    try:
        with transaction.atomic():
            DuplicateSubmission.objects.create(
                message=msg,
                provider=receipt.provider,
                provider_message_id=receipt.provider_message_id,
                attempt_number=receipt.attempt_hint,
                detected_at=now,
                detected_by="receipt",
                details=details,
            )
            transitions.event_record(msg.pk, kind="duplicate_submission", status=msg.status, details=details)
            if attempt is not None and not attempt.provider_message_id:
                Attempt.objects.filter(pk=attempt.pk).update(provider_message_id=receipt.provider_message_id)
    except IntegrityError:  # recorded already by a concurrent processor
        return DUPLICATE
    log.error(
        "duplicate submission: message %s has a second provider message (attempt %s)",
        msg.public_id,
        receipt.attempt_hint,
    )
    return DUPLICATE
