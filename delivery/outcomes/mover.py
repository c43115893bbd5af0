"""Making a move: the one place the outcome tables' moves are applied to messages, for the send worker
(delivery.sending.recording), the reconciler (delivery.sending.reconcile) and the receipt processor
(receipts.processor) alike.

Each caller decides its messages' moves from the tables (delivery.outcomes.table) and says in its own words
why (the status reason, the timeline's details); the rest is worked out here, the same way for all three:

* ``wait_for``: when a message that waits is due, by the move's delay (delivery.outcomes.delays), opening
  the hold an account fault calls for; a retry the backoff's bounds no longer allow makes the move's
  ``otherwise`` instead;
* ``step``: the columns and timeline notes a move writes: ``run_after`` for a message that waits, the
  attempt count for one back to `queued` (a refunded attempt taken back), the reason code and status
  reason, and the timeline's ``retry_at``, ``charged`` and ``dead_letter``;
* ``Moves``: a batch's moves written as one compare-and-set statement per group of rows that make the same
  move with the same columns (a row that changed meanwhile moves nothing), and the opt-out signals the moves
  call for, in the caller's transaction;
* ``move_one``: one message's move and what its attempt records, in one transaction (the reconciler's
  verdicts).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from delivery.flow import provider_holds
from delivery.guards import suppression
from delivery.models import Attempt, OptOutSignal
from delivery.outcomes import delays
from delivery.outcomes.table import Delay, Move, attempt_count_after
from delivery.providers.base import ErrorInfo
from scheduling.lifecycle import transitions
from scheduling.models import Status

# A message's row as a mover reads it: ``attempt_count``, ``provider_calls``, ``due_at``, ``expires_at``; for
# a hold ``to``, ``from_number`` and ``sender_pool``; in a batch ``id`` and ``version``; for an
# opt-out signal ``tenant_id`` too.
Row = Mapping[str, Any]

# The statuses a message waits in with a due time (``run_after``); a move to any other clears it.
WAITING = frozenset({Status.QUEUED, Status.SENDING})
# The delays whose end the timeline states (``retry_at``): a hold's is its next look, a halted campaign's
# and a reconciled absence's is now.
TIMED = frozenset({Delay.THROTTLE, Delay.UNAVAILABLE, Delay.CIRCUIT, Delay.RETRY})


@dataclass(frozen=True)
class Cause:
    """What the provider said, as far as a wait depends on it: whose account, its Retry-After, and for an
    account fault the error table's row and the code (the hold's scope and words)."""

    provider: str
    account: str
    retry_after: float | None = None
    info: ErrorInfo | None = None
    error_code: str = ""


@dataclass(frozen=True)
class Wait:
    """When a message is due once its move is made."""

    move: Move  # the move made: the table's, or its ``otherwise`` when the backoff allows no retry
    run_after: datetime | None = None  # None: not waiting (a final status)
    until: datetime | None = None  # when the delay ends, before the message's validity bounds it
    decision: str = ""  # why a retry was or was not allowed (delivery.outcomes.delays.retry_decide)
    hold: provider_holds.OpenHold | None = None  # the hold it waits for (Delay.HOLD)


def wait_for(move: Move, row: Row, cause: Cause, now: datetime) -> Wait:
    """The move's delay for this message: when it is due (never after its validity, except for a look-up
    of an uncertain submission, which the reconciler ends once it expired)."""
    if move.delay in (Delay.RETRY, Delay.AT_ONCE):
        return _retry(move, row, cause, now)
    if move.delay == Delay.HOLD:
        hold = provider_holds.hold_open_for(
            provider=cause.provider,
            account=cause.account,
            info=cause.info,
            error_code=cause.error_code,
            message=row,
            now=now,
        )
        return Wait(move, hold.park_until(now), hold=hold)
    if move.delay == Delay.RECONCILE:
        return Wait(move, now + timedelta(seconds=delays.reconcile_first_look_delay()))
    seconds = _seconds(move.delay, row, cause)
    if seconds is None:
        return Wait(move)
    until = now + timedelta(seconds=seconds)
    return Wait(move, min(until, row["expires_at"]), until)


def _seconds(delay: Delay, row: Row, cause: Cause) -> float | None:
    if delay == Delay.NOW:  # due at once: the release step decides again
        return 0.0
    if delay == Delay.THROTTLE:
        return delays.throttle_delay(
            uncharged_calls=delays.uncharged_calls(row), retry_after=cause.retry_after
        )
    if delay == Delay.UNAVAILABLE:
        # The provider is unavailable, not the message wrong: an outage of any length ends a message only
        # by its validity. Backoff still grows with its earlier failures.
        uncharged = delays.uncharged_calls(row)
        return delays.unavailable_delay(uncharged_calls=uncharged, retry_after=cause.retry_after)
    if delay == Delay.CIRCUIT:
        return delays.circuit_park_delay()
    return None


def _retry(move: Move, row: Row, cause: Cause, now: datetime) -> Wait:
    """A retry, bounded by attempts (its count once the move is made), age and validity."""
    decision = delays.retry_decide(
        attempt_number=attempt_count_after(row["attempt_count"], move),
        now=now,
        first_due=row["due_at"],
        expires_at=row["expires_at"],
        retry_after=cause.retry_after,
    )
    if not decision.retry:
        assert move.otherwise is not None  # every retry names what happens without one (the tables)
        return Wait(move.otherwise, decision=decision.reason)
    run_after = now if move.delay == Delay.AT_ONCE else decision.run_after
    return Wait(move, run_after, decision.run_after, decision=decision.reason)


@dataclass(frozen=True)
class Step:
    """One message's move as it is written: the move made, its columns and the timeline's notes on it."""

    move: Move
    columns: dict[str, Any]
    notes: dict[str, Any]


def step(wait: Wait, row: Row, *, status_reason: str = "") -> Step:
    """The columns and notes of ``wait.move`` for ``row``; ``status_reason`` is the caller's words (kept
    only by a move that sets a reason code: one that leaves the reason alone leaves its words too)."""
    move = wait.move
    columns: dict[str, Any] = {}
    notes: dict[str, Any] = {}
    if move.status in WAITING:
        columns["run_after"] = wait.run_after
    if move.status == Status.QUEUED:
        columns["attempt_count"] = attempt_count_after(row["attempt_count"], move)
    if move.reason_code is not None:
        columns["reason_code"] = move.reason_code
        columns["status_reason"] = status_reason[:255]
    if wait.hold is not None:
        notes["hold_id"] = wait.hold.id
    if move.status == Status.QUEUED and move.delay in TIMED and wait.run_after is not None:
        notes["retry_at"] = wait.run_after.isoformat()
    if not move.charged:
        notes["charged"] = False
    if move.dead_letter:
        notes["dead_letter"] = True
    return Step(move, columns, notes)


@dataclass(frozen=True)
class Group:
    """Rows written by one compare-and-set statement: the same move from the same status, the same columns
    set per row (``columns``) and alike (``fixed``)."""

    from_status: str
    to_status: str
    kind: str
    columns: tuple[str, ...]
    fixed: tuple[tuple[str, Any], ...] = ()


@dataclass
class Moves:
    """A batch's moves, as they are decided, and then written (``write``)."""

    rows: dict[Group, list[tuple[int, int, dict[str, Any]]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    details: dict[int, dict[str, Any]] = field(default_factory=dict)
    opt_outs: list[OptOutSignal] = field(default_factory=list)

    def add(
        self,
        row: Row,
        move: Move,
        *,
        from_status: str,
        columns: dict[str, Any],
        details: dict[str, Any],
        fixed: Mapping[str, Any] | None = None,
    ) -> None:
        """``row`` (its ``id`` and the ``version`` it was read at) makes ``move`` from ``from_status``."""
        group = Group(
            from_status, move.status, move.kind, tuple(sorted(columns)), tuple((fixed or {}).items())
        )
        self.rows[group].append((row["id"], row["version"], columns))
        self.details[row["id"]] = details

    def opt_out(self, row: Row, *, provider: str, error_code: str, now: datetime) -> None:
        """The provider said the recipient opted out: a signal for the suppression list."""
        self.opt_outs.append(
            OptOutSignal(
                tenant_id=row["tenant_id"],
                to=row["to"],
                from_number=row["from_number"],
                sender_pool=row["sender_pool"],
                provider=provider,
                error_code=error_code,
                message_id=row["id"],
                created_at=now,
            )
        )

    def write(self, now: datetime) -> dict[Group, list[int]]:
        """One compare-and-set statement per group, in the order the groups were met (a duplicate task's
        stale rows move nothing), then the opt-out signals. Returns the ids each group moved."""
        moved: dict[Group, list[int]] = {}
        for group, items in self.rows.items():
            fixed = {} if group.to_status in WAITING else {"run_after": None}
            fixed.update(group.fixed)
            moved[group] = transitions.transition_versioned(
                items,
                from_status=group.from_status,
                to_status=group.to_status,
                kind=group.kind,
                per_row_columns=group.columns,
                set_fields=fixed,
                details=self.details.get,
                now=now,
            )
        if self.opt_outs:
            OptOutSignal.objects.bulk_create(self.opt_outs)
            suppression.from_provider_signals(self.opt_outs)
        return moved


def move_one(
    message_id: int,
    version: int,
    move: Move,
    *,
    columns: Mapping[str, Any],
    details: dict[str, Any],
    now: datetime,
    from_statuses: tuple[str, ...] = (Status.SENDING,),
    attempt: Attempt | None = None,
    attempt_fields: Mapping[str, Any] | None = None,
) -> bool:
    """One message's move, compare-and-set on the version the caller read, and, if this call made it, what
    its attempt records (the move's attempt outcome and when the attempt ended, then ``attempt_fields``),
    in one transaction. Returns whether this call made the move."""
    set_fields: dict[str, Any] = {} if move.status in WAITING else {"run_after": None}
    set_fields.update(columns)
    record = dict(attempt_fields or {})
    if attempt is not None and move.attempt is not None:
        record = {"outcome": move.attempt, "finished_at": attempt.finished_at or now, **record}
    with transaction.atomic():
        result = transitions.transition(
            message_id,
            from_statuses=list(from_statuses),
            to_status=move.status,
            kind=move.kind,
            expected_version=version,
            details=details,
            set_fields=set_fields,
            now=now,
        )
        if result.won and attempt is not None and record:
            Attempt.objects.filter(pk=attempt.pk).update(**record)
    return result.won
