"""What a provider's answer does to a message: the decision tables, in one place.

Two tables, read the same way (a row: the answer and its error class -> the move):

* ``SUBMIT_MOVES``: the provider's answer to a submission (delivery.sending.recording), keyed by ``Answer``
  (the adapter's ``Outcome``, refined by what the gateway knows of why: the provider's own failure, an open
  circuit, a campaign halted at the message's slot) and the adapter's ``ErrorClass``;
* ``RECEIPT_MOVES``: a status callback (receipts.processor), keyed by the normalised provider status and
  the error class of its ErrorCode.

The reconciler's verdicts on an uncertain submission are moves too, named below (``ABSENT`` and the rest):
what it found out at the provider, not an answer to a submission.

A ``Move`` names the timeline kind and the target status, whether the attempt is charged (a refunded
attempt is taken back from ``attempt_count``: the claim counted it), which delay applies
(delivery.outcomes.delays), the reason code, and what to do when the move cannot be made (``otherwise``:
no retry left, or a resend the receipt's current status does not allow). The error classes come from each
adapter's error table (delivery.providers); the send path and the receipt processor act on the class,
never on a provider's codes. delivery.outcomes.mover makes the moves.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from delivery.flow.circuit import REASON_UNAVAILABLE
from delivery.flow.provider_holds import REASON_HELD
from delivery.models import AttemptOutcome
from delivery.providers.base import ErrorClass, Outcome, SubmitResult
from scheduling.campaigns.gate import REASON_PAUSED
from scheduling.lifecycle.reasons import ReasonCode
from scheduling.models import Status

# Machine-readable reasons (Message.reason_code) set on a provider's answer: ReasonCode's members.
REASON_THROTTLED = ReasonCode.PROVIDER_THROTTLED
REASON_RETRY = ReasonCode.PROVIDER_ERROR
REASON_REJECTED = ReasonCode.PROVIDER_REJECTED
REASON_OPTED_OUT = ReasonCode.OPTED_OUT
REASON_GAVE_UP = ReasonCode.RETRIES_EXHAUSTED
REASON_UNCERTAIN = ReasonCode.SUBMISSION_UNCERTAIN
REASON_CANCELED = ReasonCode.PROVIDER_CANCELED
REASON_FAILED = ReasonCode.PROVIDER_FAILED
REASON_UNDELIVERED = ReasonCode.PROVIDER_UNDELIVERED

# A receipt's resend (back to `queued`) applies only to a message the provider still had.
REQUEUE_FROM = (Status.SENT, Status.SENDING)


class Answer(enum.StrEnum):
    """The provider's outcome for a submission, as the gateway reads it."""

    ACCEPTED = Outcome.ACCEPTED.value
    UNCERTAIN = Outcome.UNCERTAIN.value  # may have reached the provider: looked up before any resend
    REJECTED = Outcome.REJECTED.value
    TRANSIENT = Outcome.TRANSIENT.value  # a failure of the message's own (a code a resend may get past)
    UNAVAILABLE = "provider_unavailable"  # transient, the provider's own failure (5xx, 408, network)
    CIRCUIT_OPEN = "circuit_open"  # the same while the account's circuit is open
    HALTED = "campaign_halted"  # never sent: its campaign was paused or cancelled at its slot


class Delay(enum.StrEnum):
    """Which computation of delivery.outcomes.delays sets ``run_after`` (delivery.outcomes.mover.wait_for)."""

    NONE = "none"  # a final status (run_after cleared)
    NOW = "now"  # due at once (the release step decides again)
    RETRY = "retry"  # retry_decide: charged backoff, bounded by attempts, age and validity
    THROTTLE = "throttle"  # throttle_delay (and Retry-After)
    UNAVAILABLE = "unavailable"  # unavailable_delay (and Retry-After)
    CIRCUIT = "circuit"  # circuit_park_delay
    HOLD = "hold"  # the scope's hold is opened; until its next look (delivery.flow.provider_holds)
    RECONCILE = "reconcile"  # reconcile_first_look_delay (delivery.sending.reconcile)
    # retry_decide bounds it, but it is due at once: the backoff already ran as the lease and the wait for
    # the provider's proof (a reconciled absence)
    AT_ONCE = "at_once"


@dataclass(frozen=True)
class Move:
    kind: str  # the timeline entry's kind
    status: str  # the target status
    charged: bool  # False: the attempt is refunded (not the message's fault)
    delay: Delay
    reason_code: str | None  # None: left as it is
    attempt: str | None = None  # submissions: the attempt's recorded outcome (AttemptOutcome)
    dead_letter: bool = False
    opt_out: bool = False  # records an OptOutSignal for the suppression list (delivery.guards.suppression)
    otherwise: Move | None = None  # when this move cannot be made (no retry left, no resend allowed)


def attempt_count_after(count: int, move: Move) -> int:
    """The message's attempt count once ``move`` is made: the claim counted the attempt; a move that
    does not charge it takes it back."""
    return count if move.charged else max(0, count - 1)


def provider_failure(res: SubmitResult) -> bool:
    """A failure that says the provider is unavailable (not the message's): a timeout, a connection
    error, a 5xx. These open the circuit and, while it is open, cost the message no attempt."""
    if res.outcome == Outcome.UNCERTAIN:
        return True
    if res.outcome != Outcome.TRANSIENT or res.error_class == ErrorClass.THROTTLED:
        return False
    return res.http_status is None or res.http_status >= 500 or res.http_status == 408


def unanswered(res: SubmitResult) -> bool:
    """A provider failure that got no answer at all (connection refused or timed out, a read timeout, a
    reset before any answer): the provider may be down, or only this host cut off from it
    (delivery.flow.circuit tells them apart). Every other provider failure (a 5xx, a 408, an unreadable
    answer) came from the provider itself."""
    if not res.sent or not provider_failure(res):
        return False
    return not res.answered if res.answered is not None else res.http_status is None


def answer_of(res: SubmitResult, *, halted: bool, circuit_open: bool) -> Answer:
    """``halted``: the submission was held back at its slot and its campaign is no longer running."""
    if halted and not res.sent:
        return Answer.HALTED
    if res.outcome == Outcome.TRANSIENT and provider_failure(res):
        return Answer.CIRCUIT_OPEN if circuit_open else Answer.UNAVAILABLE
    return Answer(res.outcome)


def submit_move(res: SubmitResult, *, halted: bool, circuit_open: bool) -> Move:
    return SUBMIT_MOVES[(answer_of(res, halted=halted, circuit_open=circuit_open), res.error_class)]


def receipt_move(normalized_status: str, error_class: ErrorClass | None) -> Move | None:
    """None: an informational status (the provider still holds the message): a timeline note."""
    return RECEIPT_MOVES.get((normalized_status, error_class))


QUEUED, FAILED, ATTEMPT_TRANSIENT = Status.QUEUED, Status.FAILED, AttemptOutcome.TRANSIENT_ERROR

# Each move: Move(timeline kind, target status, charged, delay, reason code, attempt outcome, ...).

# --- Submissions (delivery.sending.recording) ---
SENT = Move("sent", Status.SENT, True, Delay.NONE, "", AttemptOutcome.ACCEPTED)
UNCERTAIN = Move(
    "attempt_uncertain", Status.SENDING, True, Delay.RECONCILE, REASON_UNCERTAIN, AttemptOutcome.UNCERTAIN
)
THROTTLED = Move("throttled", QUEUED, False, Delay.THROTTLE, REASON_THROTTLED, AttemptOutcome.THROTTLED)
HELD = Move("held", QUEUED, False, Delay.HOLD, REASON_HELD, AttemptOutcome.ACCOUNT_FAULT)
WAIT_PROVIDER = Move("retry_scheduled", QUEUED, False, Delay.UNAVAILABLE, REASON_RETRY, ATTEMPT_TRANSIENT)
WAIT_CIRCUIT = Move(
    "provider_unavailable", QUEUED, False, Delay.CIRCUIT, REASON_UNAVAILABLE, ATTEMPT_TRANSIENT
)
GAVE_UP = Move("failed", FAILED, True, Delay.NONE, REASON_GAVE_UP, ATTEMPT_TRANSIENT, dead_letter=True)
RETRY = Move("retry_scheduled", QUEUED, True, Delay.RETRY, REASON_RETRY, ATTEMPT_TRANSIENT, otherwise=GAVE_UP)
REJECTED = Move(
    "failed", FAILED, True, Delay.NONE, REASON_REJECTED, AttemptOutcome.REJECTED, dead_letter=True
)
OPTED_OUT = Move(
    "failed",
    FAILED,
    True,
    Delay.NONE,
    REASON_OPTED_OUT,
    AttemptOutcome.REJECTED,
    dead_letter=True,
    opt_out=True,
)
# The reason code is left empty when the campaign was cancelled rather than paused: the release step
# decides on its committed state.
CAMPAIGN_WAIT = Move("campaign_paused", QUEUED, False, Delay.NOW, REASON_PAUSED, ATTEMPT_TRANSIENT)

CLASSES: tuple[ErrorClass | None, ...] = (None, *ErrorClass)


def _rows(key: str, default: Move, **by_class: Move) -> dict[tuple[str, ErrorClass | None], Move]:
    """A row per error class (and none) for one answer: ``default`` unless the class is named."""
    return {(key, cls): by_class.get(cls.name.lower() if cls else "none", default) for cls in CLASSES}


SUBMIT_MOVES: dict[tuple[str, ErrorClass | None], Move] = {
    **_rows(Answer.HALTED, CAMPAIGN_WAIT),
    **_rows(Answer.ACCEPTED, SENT),
    **_rows(Answer.UNCERTAIN, UNCERTAIN),
    # A throttle or an account fault decides whatever the outcome says; then who failed decides.
    **_rows(Answer.TRANSIENT, RETRY, throttled=THROTTLED, account_fault=HELD),
    **_rows(Answer.UNAVAILABLE, WAIT_PROVIDER, throttled=THROTTLED, account_fault=HELD),
    **_rows(Answer.CIRCUIT_OPEN, WAIT_CIRCUIT, throttled=THROTTLED, account_fault=HELD),
    **_rows(Answer.REJECTED, REJECTED, throttled=THROTTLED, account_fault=HELD, opted_out=OPTED_OUT),
}

# --- Receipts (receipts.processor) ---
# `failed` means the provider never handed the message on, so a resend cannot duplicate it: the classes a
# resend may get past go back to `queued` (off the failed sid), if the message is still sent/sending.
R_SENT = Move("sent", Status.SENT, True, Delay.NONE, None)
R_DELIVERED = Move("delivered", Status.DELIVERED, True, Delay.NONE, None)
R_UNDELIVERED = Move("undelivered", Status.UNDELIVERED, True, Delay.NONE, REASON_UNDELIVERED)
R_UNDELIVERED_OPTED_OUT = Move(
    "undelivered", Status.UNDELIVERED, True, Delay.NONE, REASON_OPTED_OUT, opt_out=True
)
R_FAILED = Move("failed", FAILED, True, Delay.NONE, REASON_FAILED)
R_FAILED_OPTED_OUT = Move("failed", FAILED, True, Delay.NONE, REASON_OPTED_OUT, opt_out=True)
R_THROTTLED = Move("throttled", QUEUED, False, Delay.THROTTLE, REASON_THROTTLED, otherwise=R_FAILED)
R_HELD = Move("held", QUEUED, False, Delay.HOLD, REASON_HELD, otherwise=R_FAILED)
R_RETRY = Move("retry_scheduled", QUEUED, True, Delay.RETRY, REASON_RETRY, otherwise=R_FAILED)
R_CANCELED = Move("failed", FAILED, True, Delay.NONE, REASON_CANCELED)

RECEIPT_MOVES: dict[tuple[str, ErrorClass | None], Move] = {
    **_rows("sent", R_SENT),
    **_rows("delivered", R_DELIVERED),
    **_rows("undelivered", R_UNDELIVERED, opted_out=R_UNDELIVERED_OPTED_OUT),
    **_rows(
        "failed",
        R_FAILED,
        throttled=R_THROTTLED,
        account_fault=R_HELD,
        transient=R_RETRY,
        opted_out=R_FAILED_OPTED_OUT,
    ),
    **_rows("canceled", R_CANCELED),
}
# The message status each provider status proves (its furthest move; `failed` may still resend).
RECEIPT_TARGET = {status: move.status for (status, cls), move in RECEIPT_MOVES.items() if cls is None}

# --- Verdicts on an uncertain submission (delivery.sending.reconcile) ---
# The provider has it: sent under its id, never sent again.
FOUND = Move("reconciled_found", Status.SENT, True, Delay.NONE, "", AttemptOutcome.RECONCILED_FOUND)
# More matching copies than uncertain messages: probably sent, which copy cannot be told; never resent.
AMBIGUOUS = Move(
    "reconciled_ambiguous",
    Status.SENT,
    True,
    Delay.NONE,
    ReasonCode.RECONCILED_AMBIGUOUS,
    AttemptOutcome.RECONCILED_AMBIGUOUS,
)
# A 404 the account itself does not confirm: the account is held, the message stays uncertain.
UNCERTAIN_HELD = Move("reconcile_held", Status.SENDING, True, Delay.HOLD, REASON_HELD)
# Not found yet, by a listing too early to prove absence: looked up again.
LOOK_AGAIN = Move("reconcile_absent_once", Status.SENDING, True, Delay.RECONCILE, None)
# The provider never got it: like a connection that failed, not the message's attempt (uncharged; only its
# validity and the retry window end it).
ABSENT_GAVE_UP = Move(
    "failed", FAILED, True, Delay.NONE, REASON_GAVE_UP, AttemptOutcome.RECONCILED_ABSENT, dead_letter=True
)
ABSENT = Move(
    "reconciled_absent",
    QUEUED,
    False,
    Delay.AT_ONCE,
    "",
    AttemptOutcome.RECONCILED_ABSENT,
    otherwise=ABSENT_GAVE_UP,
)
# Its validity passed before the provider could be shown not to have it: it may or may not have been sent.
UNCERTAIN_EXPIRED = Move("failed", FAILED, True, Delay.NONE, ReasonCode.UNCERTAIN_EXPIRED, dead_letter=True)
