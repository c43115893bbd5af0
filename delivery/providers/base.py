"""The provider adapter boundary.

Everything provider-specific lives behind ``ProviderAdapter``. The send worker hands an adapter a batch
of ``Submission``s and gets one ``SubmitResult`` per submission back, in the same order; it never sees
an SDK exception. Only modules under ``delivery/providers/`` import a provider SDK.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime


class Outcome(enum.StrEnum):
    ACCEPTED = "accepted"  # the provider took the message; provider_message_id is set
    REJECTED = "rejected"  # permanent: retrying the same request cannot succeed (bad number, 4xx code)
    TRANSIENT = "transient_error"  # the provider certainly did not take it; a retry is safe
    UNCERTAIN = "uncertain"  # the request may have reached the provider (timeout, reset mid-request)


@dataclass(frozen=True)
class Submission:
    message_id: int  # internal pk, for correlation only; never sent to the provider
    to: str
    body: str
    from_number: str = ""
    messaging_service_sid: str = ""
    status_callback: str = ""
    idempotency_token: str = ""


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


class ProviderAdapter:
    name: str = "base"

    def submit_many(self, submissions: list[Submission]) -> list[SubmitResult]:
        """Submit a batch concurrently; one result per submission, same order. Never raises for a
        per-message failure."""
        raise NotImplementedError

    def fetch(self, provider_message_id: str) -> ProviderMessage | None:
        """Look one message up by the provider's id; None when the provider does not know it."""
        raise NotImplementedError

    def find_submissions(
        self, *, to: str, from_number: str, messaging_service_sid: str, since: datetime
    ) -> list[ProviderMessage]:
        """Messages the provider accepted for this recipient and sender since ``since`` (for
        reconciling an uncertain attempt whose provider id was never stored)."""
        raise NotImplementedError

    def normalize_status(self, raw_status: str) -> str:
        """Map a provider status to one of ours (queued, sending, sent, delivered, undelivered,
        failed) or "" when unknown."""
        raise NotImplementedError

    def validate_callback(self, url: str, params: dict, signature: str) -> bool:
        raise NotImplementedError
