"""The project's own refusals, raised by services (business rules), never by HTTP code.

A service says *what* went wrong: a record that is not there, a state that forbids the change, an input
that breaks a rule (naming the field), a quota or rate spent, a dependency that does not answer. It does
not know about HTTP: ``smsgw.http.errors.api_exception_handler`` turns each of these into the API's error
envelope and status, and the admin and the tasks catch them by class.

Plain Python: no Django, no DRF, so any module may import it.
"""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """A refusal: ``code`` (machine-readable, the envelope's ``error.code``), ``message`` (for people)
    and ``extra`` (further keys of the envelope, e.g. a quota's limit and use)."""

    code = "error"

    def __init__(self, message: str, *, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.extra: dict[str, Any] = dict(extra or {})

    def __str__(self) -> str:
        return self.message


class NotFoundError(DomainError):
    """No such record for this tenant (another tenant's record is not found either)."""

    code = "not_found"


class ConflictError(DomainError):
    """The record's state forbids the change; ``current_status`` is the state it is in now."""

    code = "conflict"

    def __init__(self, message: str, *, current_status: str = "", extra: dict[str, Any] | None = None):
        super().__init__(message, extra=extra)
        self.current_status = current_status


class IdempotencyMismatch(DomainError):
    """An Idempotency-Key used again with a different request."""

    code = "idempotency_key_reused"


class InvalidInput(DomainError):
    """A value breaks a rule; ``field`` names it as the request spells it (``to``, ``send_at``, ...);
    ``reason`` says which rule when a caller needs to tell them apart (the Twilio-compatible API maps it
    to Twilio's error codes: ``suppressed``, ``destination``, ``no_sender``, ``empty``, ``too_long``,
    ``window``); empty for the rest."""

    code = "invalid"

    def __init__(self, field: str, message: str, *, reason: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.reason = reason


class QuotaExceeded(DomainError):
    """A tenant quota would be passed (scheduling.limits.quotas); ``retry_after`` in seconds when waiting
    helps, else None; ``extra`` names the quota, its limit and use."""

    code = "quota_exceeded"

    def __init__(self, message: str, *, extra: dict[str, Any], retry_after: int | None) -> None:
        super().__init__(message, extra=extra)
        self.retry_after = retry_after


class RateLimited(DomainError):
    """Too many requests for an API key (scheduling.limits.ratelimit); retry in ``retry_after`` seconds."""

    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Unavailable(DomainError):
    """A dependency does not answer; retry in ``retry_after`` seconds."""

    code = "unavailable"

    def __init__(self, message: str, *, retry_after: int, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message, extra=extra)
        self.retry_after = retry_after


class DatabaseUnavailable(Unavailable):
    """The database does not answer (smsgw.http.unavailable)."""

    code = "database_unavailable"
