"""The hand-off contract between the pipeline's stages, in the kernel: what one stage hands the next, and
the slots through which a stage reaches a later one without importing it.

The stages are apps (scheduling, delivery, receipts) that import downwards only: scheduling never imports
delivery, delivery never imports receipts. Where the flow goes the other way (the sweep asks delivery's
gates whether a message may go; a birth asks delivery's router for its route; the reconciler hands a found
copy to the receipt intake), the earlier stage calls a slot here, typed by a protocol, and the composition
root (config.wiring) fills every slot once, when Django is ready. That is the one idiom: no stage names
another by a dotted string, and the order of the release gates is one list in the composition root.

A slot read before it is filled raises ``ImproperlyConfigured`` naming it (a process that did not load
the ``config`` app: every entry point does, through ``INSTALLED_APPS``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from smsgw.models import Tenant


# What the sweep hands each release gate: one due message, as much of it as a gate needs.
@dataclass
class Candidate:
    id: int
    version: int
    status: str
    tenant_id: int
    priority: str
    sender: str
    segments: int
    run_after: datetime
    reason_code: str
    expires_at: datetime | None = None
    provider: str = ""  # the message's provider key: the gate resolves its account, limits and circuit
    to: str = ""  # the recipient: the velocity gate counts destinations (delivery.guards.velocity)


@dataclass
class Park:
    """A message that waits where it is: until when, why, and the timeline entry of its first wait."""

    until: datetime
    reason_code: str
    status_reason: str
    kind: str  # the timeline entry written the first time a message waits for this reason
    details: dict


@dataclass
class Decision:
    """A gate's answer: what goes now, what waits (and until when), and which released ones are probes."""

    release: list[Candidate] = field(default_factory=list)
    park: list[tuple[Candidate, Park]] = field(default_factory=list)
    probes: set[int] = field(default_factory=set)
    # Released messages' slots (epoch seconds): each is submitted at that instant, not before.
    not_before: dict[int, float] = field(default_factory=dict)


class Gate(Protocol):
    """ "May these messages go now?": given what the gate before released, at ``now``."""

    def __call__(self, candidates: list[Candidate], now: datetime, /) -> Decision: ...


class Tick(Protocol):
    """Once per sweep pass, database work only (the circuit's probe, the velocity counters' prune)."""

    def __call__(self, now: datetime, /) -> object: ...


class Router(Protocol):
    """Gives each new row its route (provider, sender, the legs to fail over to), in place: each row is a
    pair (the row, as a dict or a model instance; its tenant)."""

    def __call__(self, rows: Sequence[tuple[Any, Any]], /) -> None: ...


class Refusal(Protocol):
    @property
    def code(self) -> str: ...

    @property
    def message(self) -> str: ...


class AcceptanceChecks(Protocol):
    """The checks at acceptance that other apps own (suppression list, destination policy)."""

    def is_suppressed(self, *, tenant_id: int, number: str, from_number: str, sender_pool: str) -> bool: ...

    def suppressed_numbers(
        self, *, tenant_id: int, numbers: list[str], from_number: str, sender_pool: str
    ) -> set[str]: ...

    def destination_refusals(self, tenant: Tenant, numbers: list[str]) -> Mapping[str, Refusal]: ...


class StatusListener(Protocol):
    """Told of every status change, inside the transaction that makes it (ids, from, to, kind, when)."""

    def __call__(
        self, ids: list[int], from_status: str, to_status: str, kind: str, now: datetime, /
    ) -> None: ...


class ReceiptIntake(Protocol):
    """Takes a provider's word on a message (a callback, or a copy found by a look-up) into the receipt
    store, once: ``provider`` and the adapter's ``CallbackData``; ``received_at`` when it arrived."""

    def __call__(self, *, provider: str, callback: Any, received_at: datetime | None = None) -> Any: ...


class HistoryReader(Protocol):
    """Finished messages that left the operational tables (retention.history), read back for the tenant
    APIs as unsaved ``Message`` instances (``history_events`` holds the timeline). ``lookups`` are Django
    lookups on the columns the live table and history share (status, reason_code, to, from_number,
    created_at, due_at, sent_at); pages are newest first (``before``) or oldest first (``after``)."""

    def message(self, *, tenant_id: int, public_id: str) -> Any: ...

    def page(
        self, *, tenant_id: int, lookups: dict[str, Any], before: int | None, after: int | None, limit: int
    ) -> list[Any]: ...

    def delete(self, *, tenant_id: int, public_id: str, actor: str) -> bool:
        """The Twilio-compatible DELETE of a moved message: gone from the tenant's view, its content
        removed, audited; False when the tenant has no such message in history."""
        ...


class Redactor(Protocol):
    """Removes one message's content at once, audited (the retention room: docs/erasure.md); raises the
    domain errors (NotFoundError, ConflictError while it is still to be sent). Returns rows per table."""

    def __call__(self, *, tenant: Tenant, public_id: str, actor: str) -> Mapping[str, int]: ...


class UrlCheck(Protocol):
    """Refuses a URL a tenant must not point us at (receipts.webhooks.webhook_url_check: https, no
    credentials, public addresses only): raises ValueError saying why."""

    def __call__(self, url: str, /) -> None: ...


class AnswerHandler(Protocol):
    """A delivered outbox row's answer, for the one event type whose answer means something (a Twilio
    program's TwiML to a forwarded incoming message, inbound.facade_forward): acts on it once (a retried
    or replayed delivery acts on it again idempotently) and says what it did, for the delivery's history."""

    def __call__(self, delivery: Any, body: bytes, /) -> str: ...


class Task(Protocol):
    """A later stage's Celery task, published by an earlier one (by its task object, never its name)."""

    def apply_async(
        self, args: Any = ..., kwargs: Any = ..., *, queue: str = ..., headers: dict[str, str] = ...
    ) -> object: ...


@dataclass(frozen=True)
class ReleaseGate:
    """A gate in the sweep's order, and the setting that turns it off (None: always on)."""

    gate: Gate
    switch: str | None = None


class Slot[T]:
    """One hand-off, filled once by the composition root."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._value: T | None = None
        self._filled = False

    def fill(self, value: T) -> None:
        self._value = value
        self._filled = True

    def __call__(self) -> T:
        if not self._filled:
            raise ImproperlyConfigured(
                f"stage slot {self.name!r} is empty: the 'config' app fills it when Django is ready"
            )
        return self._value  # type: ignore[return-value]


# Filled by config.wiring.stages_install(); read by the stage that hands work on.
release_gates: Slot[Sequence[ReleaseGate]] = Slot("release gates")
release_ticks: Slot[Sequence[Tick]] = Slot("release ticks")
router: Slot[Router] = Slot("router")
acceptance_checks: Slot[AcceptanceChecks] = Slot("acceptance checks")
receipt_intake: Slot[ReceiptIntake] = Slot("receipt intake")
status_listeners: Slot[Sequence[StatusListener]] = Slot("status listeners")
# Scheduling's side of a wait and a release, for the stages after it: park messages where they are, and
# publish released ones to their send queue after the transaction commits.
park_rows: Slot[Callable[..., None]] = Slot("park rows")
# The send worker's and the reconciler's tasks, which the sweep publishes.
send_batch: Slot[Task] = Slot("send batch task")
reconcile_batch: Slot[Task] = Slot("reconcile batch task")
publish_after_commit: Slot[Callable[..., None]] = Slot("publish after commit")
# Where the tenant APIs find a finished message once it has moved out of the operational tables.
message_history: Slot[HistoryReader] = Slot("message history")
# The Twilio-compatible Body="" (scheduling.messages.final): the same removal, audit and all, as the
# retention room's POST /v1/messages/{id}/redact, which no app may import.
message_redact: Slot[Redactor] = Slot("message redaction")
# Where an API that is not receipts' checks a tenant's callback URL when it is set (the Twilio-compatible
# SmsUrl): the outbox's own SSRF check, which scheduling may not import.
url_check: Slot[UrlCheck] = Slot("webhook URL check")
# The answer to a forwarded incoming message (event type receipts.webhooks.INCOMING_EVENT): inbound's,
# which receipts may not import.
webhook_answer: Slot[AnswerHandler] = Slot("webhook answer")
