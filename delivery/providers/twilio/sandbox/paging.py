"""Request errors and the list query's parsing: ``BadRequest`` / ``Refused`` (a Twilio-shaped 400), the
``DateSent`` bounds, a message's rank in a list and the ``PageToken`` it is paged by.

``GET /2010-04-01/Accounts/{AccountSid}/Messages.json`` lists unsent messages first (newest first), then
by ``date_sent`` newest first, paged with ``PageSize``, ``Page`` and ``PageToken`` exactly as the SDK
follows them. Must not import Django.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from delivery.providers.twilio.sandbox.config import _DATE_ONLY
from delivery.providers.twilio.sandbox.lifecycle import ERROR_MESSAGES, SandboxMessage


# --- errors and query parsing ----------------------------------------------------------------------
class BadRequest(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Refused(BadRequest):
    """A create Twilio answers synchronously with 400 and stores nothing (21610, 21611)."""

    def __init__(self, code: int, outcome: str) -> None:
        super().__init__(code, ERROR_MESSAGES[code])
        self.outcome = outcome


def _parse_date_bound(key: str, raw: str) -> tuple[int, int]:
    """(first second, last second) covered by a DateSent value: a whole UTC day for ``YYYY-MM-DD``,
    one second for a datetime (naive means UTC)."""
    value = raw.strip().lstrip("=").strip()
    try:
        if _DATE_ONLY.fullmatch(value):
            start = int(datetime.fromisoformat(value).replace(tzinfo=UTC).timestamp())
            return start, start + 86399
        # a "+00:00" offset arrives as " 00:00" when the client did not percent-encode the "+"
        if len(value) > 19 and value[-6] == " ":
            value = value[:-6] + "+" + value[-5:]
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise BadRequest(20001, f"Invalid {key}: {raw!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    second = math.floor(parsed.timestamp())
    return second, second


def _created(m: SandboxMessage) -> float:
    return m.created


def _rank(now: float, m: SandboxMessage) -> tuple[int, int, int]:
    """A message's place in a list at ``now``, ascending: unsent ones first (newest created first), then
    by date_sent, newest first, then newest created first. Twilio documents only "sorted by DateSent, most
    recent first"; where messages without a date_sent go is the sandbox's choice."""
    if m.final_status != "failed" and now >= m.release_at:
        return (1, -int(m.release_at), -m.seq)
    return (0, 0, -m.seq)


def _page_token(kind: str, snapshot_us: int, upto: int, rank: tuple[int, int, int]) -> str:
    """``PA`` (the page after) or ``PB`` (the page before) a message, in the order as of the snapshot the
    first page was cut from: later pages never shift while statuses change or messages arrive."""
    return f"{kind}{snapshot_us}.{upto}.{rank[0]}.{-rank[1]}.{-rank[2]}"


def _parse_page_token(token: str) -> tuple[bool, int, int, tuple[int, int, int]]:
    """(before, snapshot_us, upto, rank) of a token made by ``_page_token``."""
    parts = token[2:].split(".")
    digits = all(p.isascii() and p.isdigit() for p in parts)  # isdigit() alone takes "²", which int() refuses
    if token[:2] not in ("PA", "PB") or len(parts) != 5 or not digits:
        raise BadRequest(20001, "Invalid PageToken")
    snapshot_us, upto, group, second, seq = (int(p) for p in parts)
    return token[:2] == "PB", snapshot_us, upto, (group, -second, -seq)
