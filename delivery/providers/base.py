"""The provider adapter boundary.

Everything provider-specific lives behind ``ProviderAdapter``. The send worker hands an adapter a batch
of ``Submission``s and gets one ``SubmitResult`` per submission back, in the same order; it never sees
an SDK exception. Only modules under ``delivery/providers/`` import a provider SDK.

Every failure, at submission or later in a status callback, is classified once, by the adapter's error
table, into one ``ErrorClass``; the send worker and the receipt processor act on the class, never on a
provider's codes or HTTP statuses.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import enum
import math
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime

from smsgw.config.providers import Capabilities as Capabilities
from smsgw.config.providers import SenderPools as SenderPools
from smsgw.config.providers import ValidityBounds as ValidityBounds
from smsgw.values.digits import is_ascii_digits
from smsgw.values.phone import mask


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


class ProviderAdapter:
    name: str = "base"
    # Where its account's settings are read (``<prefix>_ACCOUNT_SID``, ...): the provider's own name by
    # default, another prefix for a second account of the same provider.
    settings_prefix: str = ""
    # What this provider can do (its package's ``CAPABILITIES``): the core asks, never assumes.
    capabilities: Capabilities = Capabilities()
    # Its raw receipt statuses -> RECEIPT_STATUSES (its callbacks module's table), for ``normalize_status``.
    status_map: Mapping[str, str] = {}
    # The callback fields that may carry the provider's message id, in the order asked
    # (``callback_message_id``).
    callback_id_fields: tuple[str, ...] = ()
    # The keys a looked-up message's id, status and error code take in ``status_payload``: the names of
    # this provider's callback fields.
    status_payload_keys: tuple[str, str, str] = ("id", "status", "error_code")
    # The request header that carries a callback's signature (named in a 403's error).
    signature_header: str = "signature"
    # Free-text fields of a callback whose exact text means nothing to us (a description): a verified
    # callback with a NUL in one is stored with the NUL removed instead of refused (the provider would
    # not send it again after a 4xx). NUL anywhere else is still refused.
    free_text_fields: frozenset[str] = frozenset()
    # The HTTP methods its inbound-message webhook comes with (``/inbound/<provider>/``).
    inbound_methods: tuple[str, ...] = ("POST",)

    def __init__(self, name: str | None = None, settings_prefix: str | None = None) -> None:
        # One adapter per provider key (``message.provider``): another account of the same provider is
        # another key with its own settings prefix, and so its own capacity, circuit and callback URL.
        self.name = type(self).name if name is None else name
        self.settings_prefix = type(self).settings_prefix if settings_prefix is None else settings_prefix
        self._process_local()

    def _process_local(self) -> None:
        """Start this process's state (``_reset_process_state``: locks, pools, loops), start it again in
        a forked child (the parent's threads and sockets are not the child's: never closed from there),
        and close the adapter when the process exits. Called by an adapter's ``__init__``."""
        self._reset_process_state()
        ref = weakref.ref(self)

        def after_fork_in_child() -> None:
            adapter = ref()
            if adapter is not None:
                adapter._reset_process_state()

        os.register_at_fork(after_in_child=after_fork_in_child)
        atexit.register(_close_ref, ref)

    def _reset_process_state(self) -> None:
        """This process's own state, made anew (see ``_process_local``): an adapter that keeps more
        (pools, loops, clients) extends it."""
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def _this_process(self) -> None:
        """Make the state anew when this process is not the one that made it (a fork the hook missed)."""
        if self._pid != os.getpid():
            self._reset_process_state()

    def close(self) -> None:
        """Release what the process state holds. Optional."""

    @property
    def request_timeout(self) -> float:
        """Seconds a submission may take before it is given up as uncertain (reconciliation looks for
        the message within this window after the attempt started)."""
        raise NotImplementedError

    def clamp_validity(self, seconds: int) -> int:
        """``seconds`` within the validity periods this provider accepts (unchanged when it has none)."""
        bounds = self.capabilities.validity_period
        return seconds if bounds is None else bounds.clamp(seconds)

    def validity_to_send(self, submission: Submission) -> int | None:
        """The validity period (seconds) a request for ``submission`` carries, within this provider's
        bounds; None when it carries none (no expiry here and no period given). Taken now: ask as the
        request is written, after any wait for its slot or for room in the flight."""
        validity = submission.validity_at(datetime.now(UTC))
        if validity or submission.expires_at is not None:
            return self.clamp_validity(validity)
        return None

    @property
    def account(self) -> str:
        """The provider account this adapter submits with (holds and capacity are keyed by it)."""
        raise NotImplementedError

    @staticmethod
    def preload() -> None:
        """Import what submitting needs, before a worker forks its pool (so no child does). Optional."""

    def warm(self) -> None:
        """Get ready to submit (connection pools, event loop) before the first batch. Optional."""

    def submit_many(self, submissions: list[Submission]) -> list[SubmitResult]:
        """Submit a batch concurrently; one result per submission, same order. Never raises for a
        per-message failure."""
        raise NotImplementedError

    def submit_each(self, submissions: list[Submission], on_result: ResultCallback) -> None:
        """Start the submissions and return at once; ``on_result(index, result)`` is called (from another
        thread) as each one completes, exactly once each. The default runs ``submit_many`` in a thread."""

        def run() -> None:
            for index, result in enumerate(self.submit_many(submissions)):
                on_result(index, result)

        threading.Thread(target=run, name=f"{self.name}-submit", daemon=True).start()

    def fetch(self, provider_message_id: str) -> ProviderMessage | None:
        """Look one message up by the provider's id; None when the provider says it does not exist."""
        raise NotImplementedError

    def fetch_status(self, provider_message_id: str, *, timeout: float) -> CallbackData | None:
        """The message's current status at the provider, shaped as a status callback (so it goes through
        the receipt path and all its rules), with ``payload["source"] == LOOKUP_SOURCE``. None when the
        provider says the message does not exist; ProviderQueryError when no answer came in ``timeout``
        seconds."""
        raise NotImplementedError

    def find_submissions(
        self,
        *,
        to: str,
        sender: str,
        sender_pool: str,
        created_after: datetime,
        created_before: datetime,
    ) -> Lookup:
        """Messages the provider holds for this recipient and sender created in the window, in any
        status (queued ones included), for reconciling an attempt whose provider id was never stored."""
        raise NotImplementedError

    def account_answers(self) -> tuple[bool, str]:
        """Whether the account itself answers a look-up, (answers, detail); raises ProviderQueryError
        when the provider cannot answer at all. Asked before a "no such message" is believed."""
        raise NotImplementedError

    def probe(self) -> tuple[bool, str]:
        """Can this account submit at all (credentials, account state)? (ok, detail). Sends nothing."""
        raise NotImplementedError

    def classify(self, error_code: str, http_status: int | None = None) -> ErrorInfo:
        """The error table: what a provider error code (or, without one, an HTTP status) means."""
        raise NotImplementedError

    def normalize_status(self, raw_status: str) -> str:
        """Map a provider status to one of RECEIPT_STATUSES, or "" when unknown."""
        return self.status_map.get((raw_status or "").strip().lower(), "")

    def status_callback_url(self, base_url: str, message_ref: str, attempt_number: int) -> str:
        """The URL this provider should post status callbacks for one attempt to ("" without a base)."""
        # The message and attempt ride in the URL's query: a provider that signs the full URL (Twilio)
        # makes the callback name its message authentically even for an id we never stored (a request we
        # gave up on). No underscores: Twilio refuses a StatusCallback whose hostname has one ("URL must
        # contain a valid hostname and underscores are not allowed").
        base = (base_url or "").rstrip("/")
        if not base:
            return ""
        return f"{base}/receipts/{self.name}/?{HINT_MESSAGE}={message_ref}&{HINT_ATTEMPT}={attempt_number}"

    def validate_callback(self, url: str, params: dict, headers: Mapping[str, str]) -> bool:
        """Is the callback signed by the provider? Raises CallbackKeyUnknown when it names a signing key
        this host does not hold."""
        raise NotImplementedError

    def callback_replay_key(self, params: dict) -> tuple[str, float] | None:
        """For a provider whose signed callbacks are one-time (a nonce and a timestamp under the
        signature, as Vonage's): the key a verified callback is remembered by and for how many seconds,
        so the same signed request is taken once (receipts.replay). None: nothing to remember (Twilio's
        signature covers no timestamp; a repeated receipt is caught by its dedupe key)."""
        return None

    def parse_callback(self, params: dict, query: dict) -> CallbackData:
        """Parse (and redact) a validated callback; raises CallbackInvalid naming the bad field."""
        raise NotImplementedError

    def parse_inbound(self, params: dict) -> InboundMessage:
        """Parse a validated inbound-message webhook; raises CallbackInvalid naming a missing field."""
        raise NotImplementedError

    def inbound_reply(self) -> tuple[str, str]:
        """The answer to an inbound-message webhook that asks the provider to send no reply:
        (body, content type)."""
        return "", "text/plain"

    def callback_message_id(self, params: dict) -> str:
        """The provider's message id an (unverified) callback names, or "" (for a look-up)."""
        return next((str(params[f]) for f in self.callback_id_fields if params.get(f)), "")

    def status_payload(self, message: ProviderMessage) -> dict:
        """A looked-up message's status shaped as this provider's callback payload (for the timeline)."""
        id_key, status_key, error_key = self.status_payload_keys
        return {
            id_key: message.provider_message_id,
            status_key: message.status,
            error_key: message.error_code,
        }

    def body_matches(self, sent_body: str, provider_body: str) -> bool:
        """Is ``provider_body`` (as the provider stored it) the body we sent? Providers rewrite bodies
        (prefixes, character substitution); exact equality would miss our own submission."""
        raise NotImplementedError


def _close_ref(ref: weakref.ref) -> None:
    adapter = ref()
    if adapter is not None:
        with contextlib.suppress(Exception):
            adapter.close()


def redact_fields(
    params: Mapping[str, object], *, dropped: tuple[str, ...], numbers: tuple[str, ...]
) -> dict[str, str]:
    """A callback's fields as they are kept (its stored payload, logs): the ``dropped`` ones left out (the
    body, credentials, signatures), the ``numbers`` masked, every other value cut to 200 characters."""
    out: dict[str, str] = {}
    for key, value in params.items():
        if key in dropped:
            continue
        text = "" if value is None else str(value)
        out[key] = mask(text) if key in numbers else text[:200]
    return out


def carrier_minute(value: str) -> datetime | None:
    """A carrier's receipt time, ``YYMMDDhhmm`` (Twilio's RawDlrDoneDate, Vonage's scts), read as UTC
    (neither provider states its zone); None when it is not one."""
    value = (value or "").strip()
    if len(value) != 10 or not is_ascii_digits(value):
        return None
    try:
        return datetime.strptime(value, "%y%m%d%H%M").replace(tzinfo=UTC)
    except ValueError:
        return None
