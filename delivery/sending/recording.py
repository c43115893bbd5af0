"""Recording the provider's answers to a batch's submissions, as each group of them comes back
(delivery.sending.inflight): the circuit and the rates hear of them first (delivery.sending.health), then each
message makes the move ``delivery.outcomes.table.SUBMIT_MOVES`` says, through the outcome room's mover
(delivery.outcomes.mover), and a probe's hold is cleared or backed off.

A move that proves the provider did not take the message (a hold, an open circuit, transient answers past
SMSGW_FAILOVER_RETRY_ATTEMPTS) moves it to its route's next leg instead, when it has one
(delivery.routing.failover).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from delivery.flow import provider_holds as holds_service
from delivery.models import Attempt
from delivery.outcomes import mover
from delivery.outcomes import table as outcomes
from delivery.outcomes.table import Delay
from delivery.providers.base import ErrorClass, ErrorInfo, Outcome, ProviderAdapter, SubmitResult
from delivery.routing import failover
from delivery.sending import campaign_watch, inflight
from delivery.sending.attempts import attempts_finish
from delivery.sending.health import answers_report, reason_of
from scheduling.campaigns import gate as campaign_gate
from scheduling.models import Status
from smsgw.observability import events

log = logging.getLogger(__name__)

# Set alike on every message a submission's answer proves sent (its edge stamps ``sent_at``).
SENT_FIXED = {
    "run_after": None,
    "error_code": "",
    "status_reason": "",
    "reason_code": outcomes.SENT.reason_code,
}
UNCERTAIN_TEXT = "provider did not answer; will look the message up before any resend"


def outcomes_apply(done: list[inflight.Done]) -> None:
    """Record a group of answers as they came back (any mix of batches of one provider or several): the
    circuit and the rates hear of them first, then each message moves on, and a probe's hold is cleared
    or backed off."""
    by_adapter: dict[str, list[inflight.Done]] = defaultdict(list)
    for item in done:
        by_adapter[item[0].adapter.name].append(item)
    for group in by_adapter.values():
        adapter = group[0][0].adapter
        rows = [p.row for p, _ in group]
        attempts = [p.attempt for p, _ in group]
        results = [res for _, res in group]
        state = answers_report(adapter, rows, results)
        outcomes_record(adapter, rows, attempts, results, provider_down=state.is_open)
        for pending, res in group:
            hold = pending.probe
            if hold is not None and res.outcome == Outcome.ACCEPTED:
                holds_service.hold_clear(hold.id, by="probe", reason="probe message accepted")
            elif hold is not None and res.error_class == ErrorClass.ACCOUNT_FAULT:
                holds_service.hold_backoff(hold.id, detail=f"probe message refused: {res.error_code}")


@dataclass
class _Recorded:
    """A group of answers sorted into the moves that record them and the messages that fail over."""

    moves: mover.Moves = field(default_factory=mover.Moves)
    # To the route's next leg: (row, why, detail) (delivery.routing.failover)
    failovers: list[tuple[Mapping[str, Any], str, str]] = field(default_factory=list)


def outcomes_record(
    adapter: ProviderAdapter,
    rows: list[dict],
    attempts: list[Attempt],
    results: list[SubmitResult],
    *,
    provider_down: bool = False,
) -> None:
    """Record each answer, as the table says (delivery.outcomes.table.SUBMIT_MOVES). ``provider_down``: the
    account's circuit is open, so a failure of the provider's own (timeout, connection error, 5xx) waits
    for it without costing the message an attempt."""
    now = timezone.now()
    batch = _Recorded()
    for row, attempt, res in zip(rows, attempts, results, strict=True):
        # Held back at its slot because its campaign was paused or cancelled meanwhile (or its state
        # could not be read)?
        halted = not res.sent and not campaign_watch.running(row.get("campaign_id"))
        move = outcomes.submit_move(res, halted=halted, circuit_open=provider_down)
        _attempt_answered(attempt, res, move, now)
        _move_add(batch, adapter, row, attempt, res, move, now)
    with transaction.atomic():
        attempts_finish(attempts, finished_at=now)
        moved = batch.moves.write(now)
        if batch.failovers:
            failover.failover_rows(batch.failovers, now=now)
    _metrics_record(adapter, rows, results, batch.moves, moved, now)
    failed = [
        mid for g, items in batch.moves.rows.items() if g.to_status == Status.FAILED for mid, _, _ in items
    ]
    uncertain = [
        mid for g, items in batch.moves.rows.items() if g.to_status == Status.SENDING for mid, _, _ in items
    ]
    if failed or uncertain:
        public = {r["id"]: r["public_id"] for r in rows}
        ids = [public[mid] for mid in [*failed, *uncertain]]
        log.warning(
            "send batch: %d failed, %d uncertain", len(failed), len(uncertain), extra={"message_ids": ids}
        )


def _attempt_answered(attempt: Attempt, res: SubmitResult, move: outcomes.Move, now: datetime) -> None:
    attempt.finished_at = now
    attempt.http_status = res.http_status
    attempt.provider_code = res.error_code
    attempt.error_class = str(res.error_class or "")
    attempt.provider_message_id = res.provider_message_id
    attempt.latency_ms = res.latency_ms
    attempt.response = res.response
    if res.validity_period is not None:  # the request was written: what it carried, not the claim's
        attempt.validity_seconds = res.validity_period
    assert move.attempt is not None  # every submission move (outcomes.SUBMIT_MOVES) names the outcome
    attempt.outcome = move.attempt


def _move_add(
    batch: _Recorded,
    adapter: ProviderAdapter,
    row: dict,
    attempt: Attempt,
    res: SubmitResult,
    move: outcomes.Move,
    now: datetime,
) -> None:
    """One answer's move: its columns, its timeline details, and an opt-out signal if it says so."""
    via = {"provider": adapter.name, **({"route": attempt.route} if attempt.route else {})}
    moves = batch.moves
    if move.status == Status.SENT:
        columns = {"provider_message_id": res.provider_message_id, "provider_status": res.provider_status}
        details = {"provider_message_id": res.provider_message_id, "attempt": attempt.number, **via}
        moves.add(row, move, from_status=Status.SENDING, columns=columns, details=details, fixed=SENT_FIXED)
        return
    cause = mover.Cause(
        provider=adapter.name,
        account=adapter.account,
        retry_after=res.retry_after,
        info=ErrorInfo(ErrorClass.ACCOUNT_FAULT, res.error_title or reason_of(res), res.scope),
        error_code=res.error_code or str(res.http_status or ""),
    )
    details = {"attempt": attempt.number, "error_code": res.error_code, "reason": reason_of(res), **via}
    if move.status == Status.SENDING:  # uncertain: the reconciler looks it up before any resend
        wait = mover.wait_for(move, row, cause, now)
        fixed = {
            "run_after": wait.run_after,
            "reason_code": move.reason_code,
            "status_reason": UNCERTAIN_TEXT,
        }
        moves.add(row, move, from_status=Status.SENDING, columns={}, details=details, fixed=fixed)
        return
    why = _failover_why(move, row)
    if why:
        if move.delay == Delay.HOLD:  # the scope is held for every other message all the same
            mover.wait_for(move, row, cause, now)
        batch.failovers.append(({**row, "status": Status.SENDING}, why, reason_of(res)))
        return
    _move_made(moves, mover.wait_for(move, row, cause, now), row, res, details)
    if move.opt_out:
        moves.opt_out(row, provider=adapter.name, error_code=res.error_code, now=now)


def _move_made(moves: mover.Moves, wait: mover.Wait, row: dict, res: SubmitResult, details: dict) -> None:
    """A move back to `queued` or to `failed`, in the worker's words."""
    if wait.move.delay == Delay.NOW:
        # Back to waiting, due at once: the release step decides on the campaign's committed state
        # (parked, cancelled or sent), so a resume in between cannot leave it parked.
        state = campaign_watch.state(row["campaign_id"])
        text = campaign_gate.PAUSED_TEXT if state == "paused" else f"not sent: campaign {state}"
        done = mover.step(wait, row, status_reason=text)
        done.columns["error_code"] = ""
        if state != "paused":
            done.columns["reason_code"] = ""
        details = {"attempt": details["attempt"], "reason": "not sent: campaign halted"}
    else:
        done = mover.step(wait, row, status_reason=_worded(wait, reason_of(res)))
        done.columns["error_code"] = res.error_code
    if wait.hold is not None:
        details["scope"] = wait.hold.scope
    moves.add(
        row, done.move, from_status=Status.SENDING, columns=done.columns, details={**details, **done.notes}
    )


def _worded(wait: mover.Wait, reason: str) -> str:
    """The status reason of a submission's move (``reason``: what the provider answered)."""
    delay = wait.move.delay
    if delay == Delay.THROTTLE:
        assert wait.run_after is not None
        return f"provider throttled: {reason}; resend at {wait.run_after:%H:%M:%S}"
    if delay == Delay.HOLD:
        assert wait.hold is not None
        return wait.hold.describe()
    if delay == Delay.CIRCUIT:
        return f"provider unavailable (circuit open): {reason}"
    if delay == Delay.UNAVAILABLE:
        assert wait.until is not None
        return f"provider unavailable: {reason}; retry at {wait.until:%H:%M:%S}"
    if delay == Delay.RETRY:
        return f"transient: {reason}; {wait.decision}"
    if wait.decision:  # no retry was left: the move's `otherwise`
        return f"{wait.decision}; last: {reason}"
    return f"rejected by provider: {reason}"


def _failover_why(move: outcomes.Move, row: dict) -> str:
    """Why this answer moves the message to its route's next leg ("": it does not, or there is none).
    Only answers that prove the provider did not take it (delivery.routing.failover)."""
    if not failover.has_next(row):
        return ""
    if move.delay == Delay.HOLD:
        return failover.Why.HOLD
    if move.delay == Delay.CIRCUIT:
        return failover.Why.CIRCUIT
    if move.delay == Delay.RETRY and row["attempt_count"] >= settings.FAILOVER_RETRY_ATTEMPTS:
        return failover.Why.RETRIES
    return ""


def _metrics_record(
    adapter: ProviderAdapter,
    rows: list[dict],
    results: list[SubmitResult],
    moves: mover.Moves,
    moved: dict[mover.Group, list[int]],
    now: datetime,
) -> None:
    """After commit: what the provider answered, and only the moves that won their compare-and-set (a
    duplicate task that lost changed nothing and counts nothing)."""
    events.provider_answers(adapter.name, results)
    won = {mid for group, ids in moved.items() if group.to_status == Status.SENT for mid in ids}
    events.messages_sent([r for r in rows if r["id"] in won], now, provider=adapter.name)
    retries: dict[str, int] = defaultdict(int)
    dead: dict[str, int] = defaultdict(int)
    for group, ids in moved.items():
        if not ids:
            continue
        if group.to_status == Status.FAILED:
            reasons = {mid: values.get("reason_code", group.kind) for mid, _, values in moves.rows[group]}
            for mid in ids:
                dead[reasons.get(mid, group.kind)] += 1
        elif group.to_status == Status.QUEUED:
            retries[group.kind] += len(ids)
    events.send_moves(retries, dead)
