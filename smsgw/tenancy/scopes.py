"""What an API key may do: the scope vocabulary, its validation, and the check every operation makes.

A key stores a list of scope names (``ApiKey.scopes``); ``*`` grants every scope, an empty list none (a
key that authenticates and may do nothing). Each operation of ``/v1`` declares the one scope it needs
(``required_scopes`` on the view, read by smsgw.tenancy.permissions) and each operation of the
Twilio-compatible API names its own (scheduling.facade.api). docs/api.md#scopes is the table for people.

Plain Python: no Django, no DRF, so the models, the admin, the commands and the views may all import it.
"""

from __future__ import annotations

from collections.abc import Iterable

FULL_ACCESS = "*"

# Every scope, with what it grants (the admin's choices and docs/api.md say the same).
SCOPES: dict[str, str] = {
    "messages:send": "send messages (POST /v1/messages, /v1/messages/batch, /2010-04-01 create)",
    "messages:read": "read messages and their timelines (and /2010-04-01 fetch and list)",
    # An edit can change the recipient and the body, so it is as strong as sending: a key of its own.
    "messages:write": "edit or reschedule a scheduled message (PATCH /v1/messages/{id})",
    "messages:cancel": "cancel a message (POST /v1/messages/{id}/cancel; Status=canceled)",
    # Erases content the audit trail would otherwise keep: never implied by cancel or write.
    "messages:delete": "redact a message (POST /v1/messages/{id}/redact; /2010-04-01 Body= and delete)",
    # Removes a person's number from every message, schedule and campaign row: a key of its own.
    "recipients:erase": "erase every trace of one number (POST /v1/recipients/erase)",
    "schedules:read": "read schedules, their versions, occurrences and messages",
    "schedules:write": "create, edit, pause, resume and cancel schedules (they send messages)",
    "campaigns:read": "read campaigns, their messages and errors",
    "campaigns:write": "create, pause, resume and cancel campaigns (they send messages)",
    "quiet-hours:read": "read the tenant's quiet hours",
    "quiet-hours:write": "set or remove the tenant's quiet hours",
    "webhooks:manage": "read, point, remove the tenant's webhook and replay deliveries",
    "suppressions:read": "read the suppression list",
    "suppressions:write": "add to or remove from the suppression list",
    "keywords:read": "read the keyword rules (what a recipient's reply does)",
    # A rule can cancel pending messages or answer recipients: as strong as sending.
    "keywords:write": "replace the keyword rules (opt-out, opt-in, help, cancel, confirm)",
    "capacity:read": "read the tenant's sender capacity",
    "capacity:write": "set or remove a sender's rate",
    "routes:read": "read the routing rules and resolve a route",
    # The exports hold every finished message of a day (content inside its horizon): their own scope.
    "exports:read": "list and download the daily exports of finished messages",
    # Replies hold what recipients wrote; a conversation also needs messages:read (it shows both sides).
    "inbound:read": "read received messages (GET /v1/inbound) and conversations (GET /v1/conversations/{to})",
    "keys:manage": "issue, list and revoke the tenant's API keys",
    "retention:read": "read the tenant's retention horizons",
    "retention:write": "set the tenant's retention horizons (how long content and records are kept)",
}
SCOPE_CHOICES: tuple[str, ...] = (FULL_ACCESS, *SCOPES)


class UnknownScope(ValueError):
    """A scope name that is not in the vocabulary; ``scope`` is the name as given."""

    def __init__(self, scope: str) -> None:
        super().__init__(f"unknown scope {scope!r}; known: {FULL_ACCESS}, {', '.join(SCOPES)}")
        self.scope = scope


def scopes_clean(scopes: Iterable[str]) -> list[str]:
    """The scopes as stored: known names only (UnknownScope names the first that is not), no repeats, in
    the vocabulary's order; ``*`` alone when it is among them (it already grants the rest)."""
    given = {str(s).strip() for s in scopes} - {""}
    for name in sorted(given):
        if name not in SCOPE_CHOICES:
            raise UnknownScope(name)
    if FULL_ACCESS in given:
        return [FULL_ACCESS]
    return [s for s in SCOPES if s in given]


def scopes_parse(text: str) -> list[str]:
    """A comma-separated list, as the management commands take it (``messages:send,messages:read``)."""
    return scopes_clean(text.split(","))


def scopes_grant(granted: Iterable[str], scope: str) -> bool:
    """Whether a key holding ``granted`` may do what ``scope`` allows."""
    granted = set(granted)
    return FULL_ACCESS in granted or scope in granted


def scopes_within(wanted: Iterable[str], granted: Iterable[str]) -> bool:
    """Whether every scope of ``wanted`` is granted by ``granted`` (narrowing a key, or a key issuing
    another: never more than the issuer holds)."""
    granted = set(granted)
    if FULL_ACCESS in granted:
        return True
    return all(s != FULL_ACCESS and s in granted for s in wanted)
