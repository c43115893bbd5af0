"""What crosses the provider adapter boundary: a submission and its result, the slot a paced one waits
for, a message as a look-up finds it, a callback's data and an inbound message, the error classes, and
the hints a status-callback URL carries (delivery.providers.base says how an adapter uses them)."""

from __future__ import annotations

import asyncio
import enum
import math
import re
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime

from smsgw.config.providers import Capabilities as Capabilities
from smsgw.config.providers import SenderPools as SenderPools
from smsgw.config.providers import ValidityBounds as ValidityBounds


class Outcome(enum.StrEnum):
    ACCEPTED = "accepted"  # the provider took the message; provider_message_id is set
    REJECTED = "rejected"  # the provider answered and refused it; error_class says why and what next
    TRANSIENT = "transient_error"  # the provider certainly did not take it; a retry is safe
    UNCERTAIN = "uncertain"  # the request may have reached the provider (timeout, reset mid-request)


class ErrorClass(enum.StrEnum):
    """What a provider error means for the message, whatever the provider's own codes."""

    THROTTLED = "throttled"  # the provider is over capacity: wait and resend; not an attempt
    TRANSIENT = "transient"  # worth retrying with backoff; counts as an attempt
    PERMANENT = "permanent"  # this message cannot succeed as it is (bad number, blocked content, ...)
    OPTED_OUT = "opted_out"  # the recipient unsubscribed from this sender
    ACCOUNT_FAULT = "account_fault"  # our account or sender is misconfigured: hold that scope, alert


class Scope(enum.StrEnum):
    """What an error concerns: the whole account, one sender, or one destination prefix. An account
    fault holds that scope; a throttle lowers that scope's rate."""

    ACCOUNT = "account"  # credentials rejected, account suspended; the account's request or rate limit
    SENDER = "sender"  # a From / messaging service that may not send, or whose queue is full
    DESTINATION = "destination"  # a destination the account may not reach (geo permissions)


@dataclass(frozen=True)
class ErrorInfo:
    """One row of an adapter's error table."""

    error_class: ErrorClass
    title: str
    scope: Scope | None = None  # ACCOUNT_FAULT: what to hold; THROTTLED: whose rate to lower


@dataclass(frozen=True)
class Submission:
    message_id: int  # internal pk, for correlation only; never sent to the provider
    to: str
    body: str
    sender: str = ""  # a From: a number, a short code, an alphanumeric sender id
    sender_pool: str = ""  # a provider-side pool that picks the sender (``Capabilities.sender_pools``)
    status_callback: str = ""
    idempotency_token: str = ""
    # Seconds the provider may keep the message queued before dropping it, so nothing leaves the
    # provider after the message expired here. 0 = the provider's default.
    validity_period: int = 0
    # When the message expires here. Given, the validity period is taken from it at the instant the
    # request is written (``validity_at``), not when the batch was claimed: a message that then waited
    # (its paced slot, the flight's concurrency) would otherwise outlive its expiry at the provider.
    expires_at: datetime | None = None
    # Not before this instant (epoch seconds; 0 = now): a paced message's slot. The adapter waits for it
    # so the provider sees the spacing the limits asked for.
    not_before: float = 0.0
    # Asked just before the request goes (after any wait): False leaves it unsent, reported as a
    # transient outcome with sent=False (the caller knows why, e.g. the provider's circuit opened).
    still_wanted: Callable[[], bool] | None = None
    # A paced message whose process woke up too late for its slot (``LATE_SEND_SECONDS``) asks this for
    # a new one (given the missed slot) instead of going out together with its sender's next messages:
    # the answer is the new slot, or 0 to go as it is (delivery.sending.late: the sender's shared bucket).
    reslot: Callable[[float], Future[float]] | None = None

    def given_up(self) -> bool:
        """``still_wanted`` asked now, just before the request goes: True when the caller no longer wants
        it sent (the request is then not written: ``NOT_SENT``)."""
        return self.still_wanted is not None and not self.still_wanted()

    def validity_at(self, now: datetime) -> int:
        """``ceil(expires_at - now)`` seconds (unbounded: the adapter applies its provider's range), else
        ``validity_period``."""
        if self.expires_at is None:
            return self.validity_period
        return math.ceil((self.expires_at - now).total_seconds())


# A paced request about to leave more than this after its slot takes a new one (``Submission.reslot``):
# at a sender's 20/s (50 ms apart) a request up to this late still keeps any 1-s window within one
# message of the rate. Later, it would go out together with the sender's next slots.
LATE_SEND_SECONDS = 0.05


@dataclass(frozen=True)
class SlotTaken:
    """The slot a paced request went at (0: not paced) and how many times it was moved (``reslot``)."""

    slot: float = 0.0
    moved: int = 0

    def response(self) -> dict:
        """What the attempt keeps of it (bench paced reads how late each request left its slot)."""
        if not self.slot:
            return {}
        return {"slot": round(self.slot, 4), **({"reslots": self.moved} if self.moved else {})}


def _missed(submission: Submission, slot: float, moved: int) -> bool:
    return (
        slot > 0
        and submission.reslot is not None
        and moved < MAX_RESLOTS
        and time.time() - slot > LATE_SEND_SECONDS
    )


# A request moved this many times goes at its last slot, late or not: the claim's lease must not run out
# while it waits (the lease bounds the new slots too: delivery.sending.late).
MAX_RESLOTS = 20
# A new slot not given within this (the database slow or locked) is not waited for: the request goes.
RESLOT_WAIT_SECONDS = 5.0


async def slot_wait(submission: Submission) -> SlotTaken:
    """Wait for the submission's slot in an event loop; a wake-up too late for it takes a new one."""
    slot, moved = submission.not_before, 0
    while True:
        while (wait := slot - time.time()) > 0:
            await asyncio.sleep(wait)
        if not _missed(submission, slot, moved):
            return SlotTaken(slot, moved)
        try:
            new = await asyncio.wait_for(
                asyncio.wrap_future(submission.reslot(slot)),  # type: ignore[misc]
                RESLOT_WAIT_SECONDS,
            )
        except TimeoutError:
            new = 0.0
        if not new:
            return SlotTaken(slot, moved)
        slot, moved = new, moved + 1


def slot_wait_blocking(submission: Submission) -> SlotTaken:
    """``slot_wait`` for an adapter that sends from threads."""
    slot, moved = submission.not_before, 0
    while True:
        while (wait := slot - time.time()) > 0:
            time.sleep(wait)
        if not _missed(submission, slot, moved):
            return SlotTaken(slot, moved)
        try:
            new = submission.reslot(slot).result(RESLOT_WAIT_SECONDS)  # type: ignore[misc]
        except TimeoutError:
            new = 0.0
        if not new:
            return SlotTaken(slot, moved)
        slot, moved = new, moved + 1


@dataclass(frozen=True)
class SubmitResult:
    outcome: Outcome
    provider_message_id: str = ""
    provider_status: str = ""  # raw status as the provider reported it ("queued", "accepted", ...)
    error_code: str = ""  # provider's own error code, e.g. Twilio "21211"
    error_message: str = ""
    http_status: int | None = None
    retry_after: float | None = None  # seconds, from a 429/503 Retry-After header
    latency_ms: float = 0.0
    response: dict = field(default_factory=dict)  # redacted provider response, kept on the Attempt
    # For REJECTED (and TRANSIENT answers that carried a code): the error table's verdict.
    error_class: ErrorClass | None = None
    error_title: str = ""
    scope: Scope | None = None
    sent: bool = True  # False: never sent (Submission.still_wanted said no); says nothing of the provider
    validity_period: int | None = None  # the validity period the request carried, once it was written
    # Did the provider answer at all (any status, readable or not)? None: whether an HTTP status came
    # back says so (``http_status is None``: refused, timed out, reset before any answer). Tells a provider
    # that fails from a host that cannot reach it (delivery.flow.circuit).
    answered: bool | None = None


ResultCallback = Callable[[int, SubmitResult], None]

# A submission whose caller no longer wanted it when its turn came (``Submission.given_up``): never
# written, so it says nothing of the provider.
NOT_SENT = SubmitResult(
    outcome=Outcome.TRANSIENT,
    error_message="not sent: no longer wanted when its turn came",
    error_class=ErrorClass.TRANSIENT,
    error_title="not sent",
    response={"request_sent": False},
    sent=False,
)


def cut_short(exc: BaseException) -> SubmitResult:
    """The outcome of a submission an exception of ours ended before it had one (a bug, the loop
    stopping): it may have reached the provider, so it is uncertain, to be looked up before any resend.
    Every submission gets an outcome: its attempt waits for one."""
    return SubmitResult(
        outcome=Outcome.UNCERTAIN,
        error_message=type(exc).__name__,
        response={"exception": type(exc).__name__},
    )


def elapsed_ms(started: float) -> float:
    """Milliseconds since ``started`` (a ``time.perf_counter()``), as an attempt's latency."""
    return round((time.perf_counter() - started) * 1000.0, 3)


_PHONEISH = re.compile(r"\+?\d[\d\s().-]{4,}\d")


def redact(text: str) -> str:
    """Mask anything that looks like a phone number, keeping its last two digits."""
    return _PHONEISH.sub(lambda m: "***" + re.sub(r"\D", "", m.group())[-2:], text or "")


@dataclass(frozen=True)
class ProviderMessage:
    """A message as the provider knows it (for reconciliation)."""

    provider_message_id: str
    to: str
    from_number: str
    body: str
    status: str
    date_created: datetime | None
    error_code: str = ""
    sender_pool: str = ""


@dataclass(frozen=True)
class Lookup:
    """What a listing at the provider returned, and whether it can prove absence: ``complete`` is False
    when the page bound was reached before the listing ended, so something may have been missed."""

    candidates: list[ProviderMessage]
    complete: bool
    pages: int
    scanned: int
    query: dict  # what was asked, redacted, for the timeline


@dataclass(frozen=True)
class CallbackData:
    """A status callback, parsed by the adapter that owns its format."""

    provider_message_id: str
    raw_status: str
    normalized_status: str  # one of RECEIPT_STATUSES, or "" when unknown
    error_code: str = ""
    done_at: datetime | None = None  # the carrier's delivery-receipt time, when the provider passes it
    message_hint: str = ""  # our message id, carried in the callback URL we gave with the submission
    attempt_hint: int | None = None  # the attempt number, likewise
    payload: dict = field(default_factory=dict)  # redacted: numbers masked, no body


@dataclass(frozen=True)
class InboundMessage:
    """An incoming SMS (the provider's inbound webhook), parsed by the adapter that owns its format."""

    body: str
    from_number: str  # who wrote (as the provider sent it; not yet normalised)
    to_number: str  # our number it was sent to
    sender_pool: str = ""  # the sender pool that number belongs to, when the provider says
    from_field: str = "from"  # the request field that carried ``from_number`` (named in a 400)
    to_field: str = "to"  # and the one that carried ``to_number``
    # The provider's id of this message (of this part, for a part of a long one): what a retry of the
    # same webhook repeats, so what duplicates are told apart by (inbound.intake).
    message_id: str = ""
    id_field: str = "id"  # the request field that carried it
    segments: int = 1  # as the provider counted them (Twilio's NumSegments); 1 for a part
    sent_at: datetime | None = None  # the provider's time for it (Vonage's message-timestamp), if given
    # One part of a long message the provider posts part by part (Vonage's concat-*): the reference the
    # parts share, how many there are, and which this is (1-based). concat_total 0: a whole message.
    concat_ref: str = ""
    concat_total: int = 0
    concat_part: int = 0
    payload: dict = field(default_factory=dict)  # the provider's other fields: no body, numbers masked


# The query parameters of the status callback URL given with each submission (``status_callback_url``):
# our message's public id and the attempt number, so a callback names its message even for a provider
# id never stored (an answer that was lost).
HINT_MESSAGE = "m"
HINT_ATTEMPT = "a"
HINT_MESSAGE_RE = re.compile(r"[0-9a-f]{24}")

# ``CallbackData.payload["source"]`` of a status the gateway looked up itself (``fetch_status``) rather
# than one the provider posted: it is stored and applied as a receipt, and its timeline entry says so.
LOOKUP_SOURCE = "lookup"


class CallbackKeyUnknown(Exception):
    """A callback signed with a key the provider names but this host does not hold (our configuration,
    not the caller, is what is missing): it cannot be verified, yet may well be genuine."""

    def __init__(self, key_id: str):
        super().__init__(f"signed with key id {key_id[:64]!r}, not configured here")
        self.key_id = key_id[:64]


class CallbackInvalid(ValueError):
    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field = field_name


# What a provider status means for us (``CallbackData.normalized_status`` / ``normalize_status``):
#   informational: the provider still holds it (accepted, scheduled, queued, sending) -> timeline note
#   sent / delivered / undelivered / failed -> the message status it proves
#   canceled -> never sent (cancelled at the provider); inbound -> not an outbound status at all
RECEIPT_STATUSES = frozenset(
    {"queued", "sending", "sent", "delivered", "undelivered", "failed", "canceled", "inbound"}
)
