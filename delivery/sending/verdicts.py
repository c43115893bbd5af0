"""The reconciler's verdicts on an uncertain submission (delivery.sending.reconcile), each a move of the
outcome tables (delivery.outcomes.table: ``FOUND``, ``AMBIGUOUS``, ``UNCERTAIN_HELD``, ``LOOK_AGAIN``,
``ABSENT``, ``UNCERTAIN_EXPIRED``) made by the outcome room's mover (delivery.outcomes.mover.move_one): the
message's move and what its attempt records, in one transaction, compare-and-set on the version the
reconciler read. Each returns what was decided, or "not_sending" when the message moved meanwhile."""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction

from delivery.flow import provider_holds
from delivery.models import Attempt
from delivery.outcomes import mover
from delivery.outcomes import table as outcomes
from delivery.providers.base import ProviderAdapter, ProviderMessage, Scope
from delivery.routing import failover
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from smsgw import tracing

log = logging.getLogger(__name__)


def found_record(
    msg: Message,
    attempt: Attempt | None,
    *,
    provider_message_id: str,
    provider_status: str,
    sent_at: datetime,
    details: dict,
    now: datetime,
) -> bool:
    """Record that the provider has this attempt's submission (``reconciled_found``): the message is sent
    under ``provider_message_id`` and is never sent again. From `sending`, or from `queued` when a resend
    was queued before the proof came (receipts.unknown). Returns whether this call made the move."""
    done = mover.step(mover.Wait(outcomes.FOUND), {})
    return mover.move_one(
        msg.pk,
        msg.version,
        outcomes.FOUND,
        from_statuses=(msg.status,) if msg.status in (Status.SENDING, Status.QUEUED) else (Status.SENDING,),
        details={"provider_message_id": provider_message_id, "provider_status": provider_status, **details},
        columns={
            "provider_message_id": provider_message_id,
            "provider_status": provider_status,
            "sent_at": sent_at,
            **done.columns,
        },
        now=now,
        attempt=attempt,
        attempt_fields={"provider_message_id": provider_message_id},
    )


def ambiguous(
    msg: Message, attempt: Attempt | None, free: list[ProviderMessage], lookup: dict, now: datetime
) -> str:
    """More copies at the provider match than we have uncertain messages for them: one is probably ours,
    but which cannot be told. Never resent (that could be a second copy); recorded sent without a sid and
    flagged for an operator (reason code reconciled_ambiguous)."""
    text = f"found, ambiguous: {len(free)} matching copies at the provider; not resent"
    done = mover.step(mover.Wait(outcomes.AMBIGUOUS), {}, status_reason=text)
    won = mover.move_one(
        msg.pk,
        msg.version,
        outcomes.AMBIGUOUS,
        details={
            "lookup": lookup,
            "candidates": [c.provider_message_id for c in free[:10]],
            "decision": "found, ambiguous: more matching copies than uncertain messages; not resent",
        },
        columns={"sent_at": max(attempt.started_at if attempt else msg.due_at, msg.due_at), **done.columns},
        now=now,
        attempt=attempt,
    )
    if won:
        log.warning(
            "reconcile: message %s found ambiguous (%d matching copies); not resent",
            msg.public_id,
            len(free),
            extra=tracing.log_fields(msg.public_id, msg.trace_context),
        )
    return "ambiguous" if won else "not_sending"


def held(msg: Message, adapter: ProviderAdapter, lookup: dict, now: datetime, detail: str) -> str:
    """A fetch answered 404 and the account did not answer either: the configuration (account SID, base
    URL, credentials) is wrong, not the message. The account is held (its send worker stops), and the
    message stays `sending`, looked up again when the hold clears: nothing is resent meanwhile."""
    hold = provider_holds.hold_open(
        provider=adapter.name,
        account=adapter.account,
        scope=Scope.ACCOUNT,
        scope_value="",
        error_code="20404",
        reason=f"a message fetch answered 404 and the account fetch failed ({detail})",
        now=now,
    )
    text = "uncertain; the provider account is held (a fetch and the account fetch failed)"
    done = mover.step(
        mover.Wait(outcomes.UNCERTAIN_HELD, hold.park_until(now), hold=hold), {}, status_reason=text
    )
    won = mover.move_one(
        msg.pk,
        msg.version,
        outcomes.UNCERTAIN_HELD,
        details={
            "lookup": lookup,
            "hold_id": hold.id,
            "decision": "404 not believed: the account itself does not answer; held, not resent",
        },
        columns=done.columns,
        now=now,
    )
    return "held" if won else "not_sending"


def inconclusive(msg: Message, lookup: dict, now: datetime) -> str:
    """The listing hit its page bound: absence cannot be proven. Wait (another look at the next lease
    expiry); once the validity has passed, the message can no longer be sent anyway: it fails, saying
    that it may or may not have been sent, instead of risking a second copy."""
    if now >= msg.expires_at:
        text = "validity passed before the provider could be shown not to have it"
        done = mover.step(mover.Wait(outcomes.UNCERTAIN_EXPIRED), {}, status_reason=text)
        mover.move_one(
            msg.pk,
            msg.version,
            outcomes.UNCERTAIN_EXPIRED,
            details={**done.notes, "lookup": lookup, "reason": "validity passed while uncertain"},
            columns=done.columns,
            now=now,
        )
        return "inconclusive"
    transitions.event_record(
        msg.pk,
        kind="reconcile_inconclusive",
        status=msg.status,
        details={"lookup": lookup, "decision": "listing incomplete: not resending; will look again"},
    )
    return "inconclusive"


def absent_once(msg: Message, attempt: Attempt, lookup: dict, now: datetime, again_at: datetime) -> str:
    """Not found by a listing too early to prove absence: looked up again at ``again_at``."""
    done = mover.step(mover.Wait(outcomes.LOOK_AGAIN, again_at), {})
    won = mover.move_one(
        msg.pk,
        msg.version,
        outcomes.LOOK_AGAIN,
        details={
            "lookup": lookup,
            "decision": "not found yet; a listing this early cannot prove absence: looking again",
            "look_again_at": again_at.isoformat(),
        },
        columns=done.columns,
        now=now,
        attempt=attempt,
        attempt_fields=None if attempt.lookup_absent_at else {"lookup_absent_at": now},
    )
    return "absent_once" if won else "not_sending"


def absent(msg: Message, attempt: Attempt | None, lookup: dict, now: datetime, *, rule: str, why: str) -> str:
    """The provider proved not to have it (``rule`` says how, ``why`` in words): sent again at once, to
    the route's next leg when it has one, unless the retry window is used up (``ABSENT``)."""
    row = {"attempt_count": msg.attempt_count, "due_at": msg.due_at, "expires_at": msg.expires_at}
    # A route with another leg moves on: the provider proved it did not take it (delivery.routing.failover).
    moves_on = failover.has_next({"route_plan": msg.route_plan, "route_leg": msg.route_leg})
    wait = mover.wait_for(outcomes.ABSENT, row, mover.Cause(msg.provider, ""), now)
    if moves_on and wait.move is not outcomes.ABSENT:
        wait = mover.Wait(outcomes.ABSENT, now)
    if wait.move is outcomes.ABSENT:
        details: dict = {"lookup": lookup, "decision": "retry is safe", "rule": rule, "why": why}
        done = mover.step(wait, row, status_reason="reconciled: not at provider, retrying")
    else:
        done = mover.step(wait, row, status_reason=wait.decision)
        details = {**done.notes, "reason": wait.decision, "lookup": lookup, "rule": rule, "why": why}
    # One transaction: the row stays locked by the verdict's update until the move to the next leg, so no
    # sweep can hand it to this leg's provider in between.
    with transaction.atomic():
        won = mover.move_one(
            msg.pk, msg.version, done.move, details=details, columns=done.columns, now=now, attempt=attempt
        )
        if won and moves_on:
            row_now = (
                Message.objects.filter(pk=msg.pk, status=Status.QUEUED).values(*failover.ROW_FIELDS).first()
            )
            if row_now is not None:
                failover.failover_rows([(row_now, failover.Why.ABSENT, f"rule {rule}")], now=now)
    return "absent" if won else "not_sending"
