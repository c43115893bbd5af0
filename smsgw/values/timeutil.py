"""Resolving a requested send time to a UTC instant (docs/api.md, `send_at` and `dst_policy`).

A scheduled send is requested either as

* a local wall time plus an IANA timezone (``"2026-03-08T02:30"`` + ``"America/New_York"``), or
* an absolute instant with an explicit UTC offset (``"2026-12-01T09:00:00+05:30"`` or ``"...Z"``).

Both are stored as given; the UTC instant (``due_at``) is derived. Local wall times that fall on a
clock change are resolved by a fixed, recorded policy:

* a time that does not exist (spring-forward gap) moves forward by the size of the gap
  (America/New_York 2026-03-08 02:30 -> 03:30 EDT = 07:30Z, adjustment ``gap_shifted_forward``);
* an ambiguous time (fall-back overlap) takes the first occurrence unless the request asks for the
  second (``DstPolicy.LATER``); the occurrence used is recorded as the adjustment.

Detection uses PEP 495 ``fold`` semantics of :mod:`zoneinfo`: a wall time is ambiguous or
nonexistent exactly when ``fold=0`` and ``fold=1`` give different UTC offsets; it is nonexistent when
converting it to UTC and back does not give the same wall time.

Everything here is pure Python (no Django, no DB) so it can be used from serializers, the sweeper and
tests alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "DstAdjustment",
    "DstPolicy",
    "ResolvedTime",
    "TimeResolutionError",
    "check_window",
    "parse_timezone",
    "resolve_local",
    "resolve_send_at",
    "utc_text",
    "utc_texts",
]


class DstPolicy(StrEnum):
    """Which occurrence of an ambiguous (fall-back) local time to use."""

    EARLIER = "earlier"
    LATER = "later"


class DstAdjustment(StrEnum):
    """What, if anything, the resolver had to decide about the requested wall time."""

    NONE = "none"
    GAP_SHIFTED = "gap_shifted_forward"
    AMBIGUOUS_FIRST = "ambiguous_first"
    AMBIGUOUS_SECOND = "ambiguous_second"


class TimeResolutionError(ValueError):
    """A send time that cannot be resolved; ``field`` names the request field at fault, ``code`` the
    field error code the API answers (docs/errors.md, "Field error codes"). Messages do not repeat the
    value given: it is the caller's, and may be anything."""

    FIELDS = frozenset({"send_at", "timezone", "dst_policy"})
    CODES = {"send_at": "invalid_datetime", "timezone": "invalid_timezone", "dst_policy": "invalid_choice"}

    def __init__(self, field: str, message: str) -> None:
        if field not in self.FIELDS:
            raise ValueError(f"unknown field {field!r}; expected one of {sorted(self.FIELDS)}")
        super().__init__(message)
        self.field = field
        self.message = message
        self.code = self.CODES[field]

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"TimeResolutionError(field={self.field!r}, message={self.message!r})"


def utc_text(dt: datetime) -> str:
    """An instant as the API writes every one (docs/api.md, "Timestamps"): RFC 3339 in UTC with ``Z``,
    ``2026-03-08T07:30:00Z``, with microseconds only when there are any (``...:00.250000Z``), as DRF's
    DateTimeField writes them."""
    return dt.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"


_fmt_utc = utc_text

# An instant written with an offset by isoformat() (before utc_text, stored in event details).
_OFFSET_INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d(?:\.\d{1,6})?)?[+-]\d\d:\d\d")


def utc_texts(details: dict[str, Any] | None) -> dict[str, Any] | None:
    """``details`` (a message event's, stored as JSON) with each instant written with an offset rewritten as
    ``utc_text`` writes it: the rows stored before it was the one format keep their ``+00:00``."""
    if details is None:
        return None
    out = {}
    for key, value in details.items():
        if isinstance(value, str) and _OFFSET_INSTANT.fullmatch(value):
            value = utc_text(datetime.fromisoformat(value))
        out[key] = value
    return out


def _fmt_clock(dt: datetime) -> str:
    """Wall-clock time of day: ``02:30``, ``02:30:15`` or ``02:30:15.250000``."""
    if dt.microsecond:
        return dt.strftime("%H:%M:%S.%f")
    if dt.second:
        return dt.strftime("%H:%M:%S")
    return dt.strftime("%H:%M")


def _fmt_offset(offset: timedelta) -> str:
    """``+05:30``, ``-04:00``, ``+00:00`` (``+05:30:15`` for second-precision offsets)."""
    total = int(offset.total_seconds())
    sign = "-" if total < 0 else "+"
    total = abs(total)
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    text = f"{sign}{hours:02d}:{minutes:02d}"
    if seconds:
        text += f":{seconds:02d}"
    return text


@dataclass(frozen=True)
class ResolvedTime:
    """The outcome of resolving a send request.

    ``due_at``: the derived instant, timezone-aware, in UTC.
    ``local_time``: the naive wall time exactly as requested (before any gap shift); ``None`` when the
    request gave an absolute instant.
    ``timezone``: the IANA name used (or recorded as display zone), or the offset as given
    (``"+02:00"``; ``"UTC"`` for a ``Z`` suffix) when the request gave only an offset.
    ``adjustment`` / ``adjustment_seconds``: the DST policy applied; seconds is the gap size for
    ``GAP_SHIFTED`` and 0 otherwise.
    """

    due_at: datetime
    local_time: datetime | None
    timezone: str
    adjustment: DstAdjustment = DstAdjustment.NONE
    adjustment_seconds: int = 0

    def __post_init__(self) -> None:
        # Accept plain strings (e.g. when rebuilt from a stored row) and normalise to the enum.
        object.__setattr__(self, "adjustment", DstAdjustment(self.adjustment))
        if self.due_at.tzinfo is None or self.due_at.utcoffset() != timedelta(0):
            raise ValueError("ResolvedTime.due_at must be a timezone-aware UTC datetime")
        if self.local_time is not None and self.local_time.tzinfo is not None:
            raise ValueError("ResolvedTime.local_time must be a naive wall time")
        if self.adjustment is not DstAdjustment.GAP_SHIFTED and self.adjustment_seconds:
            raise ValueError("adjustment_seconds is only meaningful for GAP_SHIFTED")

    def describe(self) -> str:
        """A human sentence for the message timeline."""
        due = _fmt_utc(self.due_at)
        local = self.local_time
        zone = self._zone()
        if local is None:
            if zone is None:
                return f"absolute instant {due} (given with UTC offset {self.timezone})"
            shown = self.due_at.astimezone(zone)
            return (
                f"absolute instant {due} ({shown.date().isoformat()} {_fmt_clock(shown)} in {self.timezone})"
            )
        day = local.date().isoformat()
        clock = _fmt_clock(local)
        kind = "DST" if zone is None or _dst_differs(local, zone) else "clock change"
        if self.adjustment is DstAdjustment.GAP_SHIFTED:
            shifted = local + timedelta(seconds=self.adjustment_seconds)
            target = _fmt_clock(shifted)
            if shifted.date() != local.date():
                target = f"{shifted.date().isoformat()} {target}"
            return (
                f"{clock} does not exist in {self.timezone} on {day} ({kind} gap); "
                f"moved forward {self.adjustment_seconds} s to {target} local"
            )
        if self.adjustment in (DstAdjustment.AMBIGUOUS_FIRST, DstAdjustment.AMBIGUOUS_SECOND):
            which = "first" if self.adjustment is DstAdjustment.AMBIGUOUS_FIRST else "second"
            utc_offset = None if zone is None else self.due_at.astimezone(zone).utcoffset()
            offset = "" if utc_offset is None else f" (UTC{_fmt_offset(utc_offset)})"
            fold = "DST fall-back" if kind == "DST" else "clock change"
            return (
                f"{clock} occurs twice in {self.timezone} on {day} ({fold}); "
                f"using the {which} occurrence{offset} = {due}"
            )
        return f"{clock} on {day} in {self.timezone} = {due}"

    def _zone(self) -> ZoneInfo | None:
        try:
            return parse_timezone(self.timezone)
        except TimeResolutionError:
            return None


def _dst_differs(local: datetime, zone: ZoneInfo) -> bool:
    """Whether the two readings of ``local`` differ in DST status (a DST change, not a zone change)."""
    return local.replace(tzinfo=zone, fold=0).dst() != local.replace(tzinfo=zone, fold=1).dst()


# IANA keys: slash-separated components of letters, digits, "_", "+", "-", each starting with a letter
# ("America/Argentina/Buenos_Aires", "Etc/GMT+5", "America/Port-au-Prince", "EST5EDT"). This rejects
# empty names, absolute paths, "..", trailing slashes, whitespace and NULs before touching the disk.
_TZ_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z][A-Za-z0-9_+\-]*)*")
_TZ_NAME_MAX = 64
# Files that can sit on a TZPATH but are not zones a user can ask for.
_TZ_DENY = frozenset({"localtime", "posixrules", "Factory"})
_TZ_DENY_PREFIXES = ("posix/", "right/")


def parse_timezone(name: str) -> ZoneInfo:
    """Load an IANA timezone by name (``"America/New_York"``, ``"UTC"``).

    Raises ``TimeResolutionError(field="timezone")`` for anything that is not a known IANA zone:
    empty, unknown (``"Mars/Olympus"``), directories (``"America"``), paths (``"../etc"``,
    ``"/etc/localtime"``) and host-specific files (``"localtime"``). Names are case-sensitive.
    """
    if not isinstance(name, str):
        raise TimeResolutionError("timezone", f"timezone must be a string, got {type(name).__name__}")
    unknown = TimeResolutionError(
        "timezone", "unknown timezone; expected an IANA name such as 'Europe/Berlin' or 'UTC'"
    )
    if not name:
        raise TimeResolutionError(
            "timezone", "timezone must not be empty; expected an IANA name such as 'UTC'"
        )
    if (
        len(name) > _TZ_NAME_MAX
        or not _TZ_NAME_RE.fullmatch(name)
        or name in _TZ_DENY
        or name.startswith(_TZ_DENY_PREFIXES)
    ):
        raise unknown
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError, UnicodeError):
        raise unknown from None


def _coerce_policy(policy: DstPolicy | str | None) -> DstPolicy:
    if policy is None or policy == "":
        return DstPolicy.EARLIER
    try:
        return DstPolicy(policy)
    except ValueError:
        choices = ", ".join(repr(p.value) for p in DstPolicy)
        raise TimeResolutionError("dst_policy", f"dst_policy must be one of {choices}") from None


def resolve_local(local: datetime, tz_name: str, policy: DstPolicy | str = DstPolicy.EARLIER) -> ResolvedTime:
    """Resolve a naive local wall time in ``tz_name`` to a UTC instant, applying the DST policy.

    Nonexistent times (gap) move forward by the gap regardless of ``policy``; ambiguous times take the
    first occurrence for ``DstPolicy.EARLIER`` and the second for ``DstPolicy.LATER``.
    """
    if not isinstance(local, datetime):
        raise TimeResolutionError("send_at", f"send_at must be a datetime, got {type(local).__name__}")
    if local.tzinfo is not None:
        raise TimeResolutionError("send_at", "a local wall time must not carry a UTC offset")
    chosen = _coerce_policy(policy)
    zone = parse_timezone(tz_name)
    first = local.replace(tzinfo=zone, fold=0)
    second = local.replace(tzinfo=zone, fold=1)
    try:
        utc_first = first.astimezone(UTC)
        utc_second = second.astimezone(UTC)
        back_first = utc_first.astimezone(zone).replace(tzinfo=None)
    except OverflowError:
        raise TimeResolutionError("send_at", f"send_at {local.isoformat()} is out of range") from None
    wall = local.replace(fold=0)

    if first.utcoffset() == second.utcoffset():
        return ResolvedTime(due_at=utc_first, local_time=wall, timezone=tz_name)

    if back_first != wall:
        # Nonexistent: fold=0 applies the offset from before the transition, which lands the instant
        # just after the gap, i.e. the wall time shifted forward by exactly the gap.
        gap = int((back_first - wall).total_seconds())
        return ResolvedTime(
            due_at=utc_first,
            local_time=wall,
            timezone=tz_name,
            adjustment=DstAdjustment.GAP_SHIFTED,
            adjustment_seconds=gap,
        )

    # Ambiguous: both folds exist; "first occurrence" is the earlier UTC instant.
    earlier, later = sorted((utc_first, utc_second))
    if chosen is DstPolicy.LATER:
        return ResolvedTime(
            due_at=later, local_time=wall, timezone=tz_name, adjustment=DstAdjustment.AMBIGUOUS_SECOND
        )
    return ResolvedTime(
        due_at=earlier, local_time=wall, timezone=tz_name, adjustment=DstAdjustment.AMBIGUOUS_FIRST
    )


_SEND_AT_MAX = 64
_SEND_AT_FORMAT = (
    "expected an ISO 8601 date-time: a local wall time such as '2026-03-08T09:30:00' (with a timezone) "
    "or an absolute instant such as '2026-03-08T14:30:00Z' or '2026-03-08T09:30:00-05:00'"
)


def resolve_send_at(
    send_at: str,
    tz_name: str | None,
    policy: DstPolicy | str | None,
    default_tz: str,
) -> ResolvedTime:
    """Resolve a request's ``send_at`` (ISO 8601 string) and optional ``timezone``.

    * With an offset or ``Z``: an absolute instant. ``tz_name``, if given, is only validated and
      recorded as the display zone; otherwise the offset as given is recorded (``"UTC"`` for ``Z``).
      The adjustment is ``NONE`` and ``local_time`` is ``None``.
    * Without an offset: a local wall time in ``tz_name`` (``default_tz`` when ``tz_name`` is
      ``None`` or empty), resolved by :func:`resolve_local`.

    Date-only strings are rejected; seconds and fractional seconds are allowed.
    """
    chosen = _coerce_policy(policy)
    if not isinstance(send_at, str):
        raise TimeResolutionError("send_at", f"send_at must be a string; {_SEND_AT_FORMAT}")
    text = send_at.strip()
    if not text:
        raise TimeResolutionError("send_at", f"send_at must not be empty; {_SEND_AT_FORMAT}")
    if len(text) > _SEND_AT_MAX:
        raise TimeResolutionError("send_at", f"send_at is too long; {_SEND_AT_FORMAT}")
    try:
        date.fromisoformat(text)
    except ValueError:
        pass
    else:
        raise TimeResolutionError(
            "send_at", f"send_at is a date only and needs a time of day; {_SEND_AT_FORMAT}"
        )
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise TimeResolutionError("send_at", f"send_at is not valid; {_SEND_AT_FORMAT}") from None

    if parsed.tzinfo is not None:
        offset = parsed.utcoffset()
        if tz_name:
            parse_timezone(tz_name)
            display = tz_name
        elif text.endswith("Z"):
            display = "UTC"
        else:
            display = _fmt_offset(offset if offset is not None else timedelta(0))
        try:
            due = parsed.astimezone(UTC)
        except OverflowError:
            raise TimeResolutionError("send_at", "send_at is out of range") from None
        return ResolvedTime(due_at=due, local_time=None, timezone=display)

    return resolve_local(parsed, tz_name or default_tz, chosen)


def check_window(
    due_at: datetime,
    *,
    now: datetime,
    past_tolerance_seconds: float,
    max_ahead_days: float,
) -> None:
    """Reject a resolved instant outside ``[now - tolerance, now + max_ahead_days]`` (inclusive).

    Raises ``TimeResolutionError(field="send_at")``. Both datetimes must be timezone-aware.
    """
    if due_at.tzinfo is None or now.tzinfo is None:
        raise TypeError("check_window needs timezone-aware datetimes")
    earliest = now - timedelta(seconds=past_tolerance_seconds)
    latest = now + timedelta(days=max_ahead_days)
    if due_at < earliest:
        behind = int((now - due_at).total_seconds())
        raise TimeResolutionError(
            "send_at",
            f"send_at {_fmt_utc(due_at)} is in the past ({behind} s before now {_fmt_utc(now)}; "
            f"tolerance {past_tolerance_seconds:g} s)",
        )
    if due_at > latest:
        raise TimeResolutionError(
            "send_at",
            f"send_at {_fmt_utc(due_at)} is too far ahead: more than {max_ahead_days:g} days after "
            f"now {_fmt_utc(now)}",
        )
