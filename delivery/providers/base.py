"""The provider adapter boundary.

Everything provider-specific lives behind ``ProviderAdapter``. The send worker hands an adapter a batch
of ``Submission``s and gets one ``SubmitResult`` per submission back, in the same order; it never sees
an SDK exception. Only modules under ``delivery/providers/`` import a provider SDK.

Every failure, at submission or later in a status callback, is classified once, by the adapter's error
table, into one ``ErrorClass``; the send worker and the receipt processor act on the class, never on a
provider's codes or HTTP statuses.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import weakref
from collections.abc import Mapping
from datetime import UTC, datetime

from delivery.providers.types import (
    HINT_ATTEMPT,
    HINT_MESSAGE,
    HINT_MESSAGE_RE,
    LATE_SEND_SECONDS,
    LOOKUP_SOURCE,
    MAX_RESLOTS,
    NOT_SENT,
    RECEIPT_STATUSES,
    RESLOT_WAIT_SECONDS,
    CallbackData,
    CallbackInvalid,
    CallbackKeyUnknown,
    ErrorClass,
    ErrorInfo,
    InboundMessage,
    Lookup,
    Outcome,
    ProviderMessage,
    ResultCallback,
    Scope,
    SlotTaken,
    Submission,
    SubmitResult,
    cut_short,
    elapsed_ms,
    redact,
    slot_wait,
    slot_wait_blocking,
)
from smsgw.config.providers import Capabilities as Capabilities
from smsgw.config.providers import SenderPools as SenderPools
from smsgw.config.providers import ValidityBounds as ValidityBounds
from smsgw.values.digits import is_ascii_digits
from smsgw.values.phone import mask

# The boundary's types live in delivery.providers.types; importers keep reaching them here.
__all__ = [
    "HINT_ATTEMPT",
    "HINT_MESSAGE",
    "HINT_MESSAGE_RE",
    "LATE_SEND_SECONDS",
    "LOOKUP_SOURCE",
    "MAX_RESLOTS",
    "NOT_SENT",
    "RECEIPT_STATUSES",
    "RESLOT_WAIT_SECONDS",
    "CallbackData",
    "CallbackInvalid",
    "CallbackKeyUnknown",
    "Capabilities",
    "ErrorClass",
    "ErrorInfo",
    "InboundMessage",
    "Lookup",
    "Outcome",
    "ProviderAdapter",
    "ProviderMessage",
    "ResultCallback",
    "Scope",
    "SenderPools",
    "SlotTaken",
    "Submission",
    "SubmitResult",
    "ValidityBounds",
    "cut_short",
    "elapsed_ms",
    "redact",
    "slot_wait",
    "slot_wait_blocking",
]


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

    def validate_inbound(self, url: str, params: dict, headers: Mapping[str, str]) -> bool:
        """Is the inbound-message webhook signed by the provider? As ``validate_callback`` unless the
        provider signs its retries of an inbound message differently."""
        return self.validate_callback(url, params, headers)

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
