"""Quiet hours (docs/scheduling.md, "Quiet hours"): a send whose due time falls inside the
recipient's local quiet window moves to
the window's end, and the move is recorded on the message.

A window is a local time-of-day range ``[start, end)`` in the recipient's timezone; ``start > end``
wraps midnight (21:00-08:00). ``start == end`` is rejected: it could mean "never" or "always".

Where the policy comes from, in order:
  1. the request's ``quiet_hours``: ``{"start": "21:00", "end": "08:00"}`` replaces the tenant's window
     for this send, ``{"enabled": false}`` switches quiet hours off for it;
  2. the tenant's window (``Tenant.quiet_hours_start/end``), unless the tenant exempts transactional
     traffic and the send is transactional.
The window is evaluated in ``recipient_timezone`` when the request gives one, else in the tenant's
default timezone. The effective window is copied onto each message (``quiet_*`` columns), because it is
applied twice: when the message is scheduled, and again by the sweep when it becomes due, so that a
message made due late (an outage, a retry) still never goes out inside the window.

Pure Python (no Django models), like ``timeutil``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from smsgw.values.timeutil import DstPolicy, TimeResolutionError, parse_timezone, resolve_local

__all__ = [
    "QuietHoursError",
    "QuietWindow",
    "move_note",
    "parse_clock",
    "parse_override",
    "quiet_details",
    "quiet_fields",
    "quiet_window_for",
    "recipient_zone",
    "stored_window",
    "tenant_quiet_window",
]

_CLOCK_RE = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])(?::([0-5][0-9]))?")  # not \d: any Unicode digit


class QuietHoursError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message

    def __str__(self) -> str:
        return self.message


def parse_clock(value, field: str) -> time:
    """``"21:00"`` or ``"21:00:00"`` (24-hour local clock time)."""
    if isinstance(value, time):
        return value.replace(microsecond=0, tzinfo=None)
    match = _CLOCK_RE.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise QuietHoursError(field, f"{value!r} is not a clock time such as 21:00 (24-hour HH:MM)")
    hours, minutes, seconds = match.groups()
    return time(int(hours), int(minutes), int(seconds or 0))


def _window_bounds(start, end, field: str) -> tuple[time, time]:
    start_t, end_t = parse_clock(start, field), parse_clock(end, field)
    if start_t == end_t:
        raise QuietHoursError(
            field,
            f"start and end are both {start_t.strftime('%H:%M')}: the window would be empty or the whole "
            'day; give two different times (use {"enabled": false} to switch quiet hours off)',
        )
    return start_t, end_t


def parse_override(value) -> dict | None:
    """Validate a request's ``quiet_hours`` and return its normalised form: ``{}`` (not given: tenant
    policy), ``{"enabled": False}`` or ``{"start": "HH:MM:SS", "end": "HH:MM:SS"}``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise QuietHoursError("quiet_hours", 'must be an object: {"start": "21:00", "end": "08:00"}')
    unknown = sorted(set(value) - {"start", "end", "enabled"})
    if unknown:
        raise QuietHoursError("quiet_hours", f"unknown key {unknown[0]!r}; use start, end or enabled")
    if "enabled" in value:
        if value["enabled"] is not False or set(value) != {"enabled"}:
            raise QuietHoursError(
                "quiet_hours",
                '{"enabled": false} switches quiet hours off; to set a window give start and end',
            )
        return {"enabled": False}
    if not value:
        return {}
    if "start" not in value or "end" not in value:
        raise QuietHoursError("quiet_hours", "needs both start and end, e.g. 21:00 and 08:00")
    start, end = _window_bounds(value["start"], value["end"], "quiet_hours")
    return {"start": start.isoformat(), "end": end.isoformat()}


@dataclass(frozen=True)
class QuietWindow:
    start: time
    end: time
    timezone: str
    source: str = ""  # tenant | request; empty when read back from a stored message

    def _local(self, instant: datetime) -> datetime:
        return instant.astimezone(parse_timezone(self.timezone)).replace(tzinfo=None)

    def contains(self, instant: datetime) -> bool:
        clock = self._local(instant).time()
        if self.start < self.end:
            return self.start <= clock < self.end
        return clock >= self.start or clock < self.end

    def end_after(self, instant: datetime) -> datetime:
        """The UTC instant at which the window containing ``instant`` ends. The local end time is
        resolved like any local time (docs/api.md, `dst_policy`): inside a DST gap it moves forward by the
        gap; when it occurs twice, the first reading that is still after ``instant`` is used."""
        local = self._local(instant)
        day: date = local.date()
        if self.start > self.end and local.time() >= self.start:
            day += timedelta(days=1)
        end_local = datetime.combine(day, self.end)
        for policy in (DstPolicy.EARLIER, DstPolicy.LATER):
            due = resolve_local(end_local, self.timezone, policy).due_at
            if due > instant:
                return due
        return instant  # unreachable for a window that contains ``instant``

    def defer(self, instant: datetime) -> datetime | None:
        """The window's end if ``instant`` falls inside the window, else None."""
        return self.end_after(instant) if self.contains(instant) else None

    def as_dict(self) -> dict:
        out = {
            "start": self.start.strftime("%H:%M") if not self.start.second else self.start.isoformat(),
            "end": self.end.strftime("%H:%M") if not self.end.second else self.end.isoformat(),
            "timezone": self.timezone,
        }
        if self.source:
            out["source"] = self.source
        return out

    def describe_move(self, original: datetime, moved: datetime) -> str:
        zone = parse_timezone(self.timezone)
        show = lambda dt: dt.astimezone(zone).strftime("%Y-%m-%d %H:%M")  # noqa: E731
        w = self.as_dict()
        source = f" ({self.source} policy)" if self.source else ""
        return (
            f"due {show(original)} {self.timezone} falls inside quiet hours {w['start']}-{w['end']}"
            f"{source}; moved to the window's end, {show(moved)} "
            f"({moved.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')})"
        )


def quiet_window_for(
    *,
    tenant_start: time | None,
    tenant_end: time | None,
    exempt_transactional: bool,
    tenant_timezone: str,
    override: dict | None,
    recipient_timezone: str | None,
    priority: str,
) -> QuietWindow | None:
    """The window that applies to one send, or None (see the module docstring for the order)."""
    override = override or {}
    if override.get("enabled") is False:
        return None
    if "start" in override:
        start, end = _window_bounds(override["start"], override["end"], "quiet_hours")
        source = "request"
    elif tenant_start is None or tenant_end is None or tenant_start == tenant_end:
        return None  # the tenant has no quiet hours
    elif exempt_transactional and priority == "transactional":  # exempt by the tenant's policy
        return None
    else:
        start, end, source = tenant_start, tenant_end, "tenant"
    tz_name = recipient_timezone or tenant_timezone or "UTC"
    try:
        parse_timezone(tz_name)
    except TimeResolutionError as exc:
        raise QuietHoursError("recipient_timezone", str(exc)) from exc
    return QuietWindow(start, end, tz_name, source)


def recipient_zone(name: str | None) -> str | None:
    """A request's ``recipient_timezone``, validated when given."""
    if not name:
        return None
    try:
        parse_timezone(name)
    except TimeResolutionError as exc:
        raise QuietHoursError("recipient_timezone", str(exc)) from exc
    return name


def tenant_quiet_window(tenant, *, override, recipient_timezone, priority) -> QuietWindow | None:
    """``quiet_window_for`` with the tenant's policy (any object with the Tenant quiet-hours fields)."""
    return quiet_window_for(
        tenant_start=tenant.quiet_hours_start,
        tenant_end=tenant.quiet_hours_end,
        exempt_transactional=tenant.quiet_hours_exempt_transactional,
        tenant_timezone=tenant.default_timezone,
        override=override,
        recipient_timezone=recipient_timezone,
        priority=priority,
    )


def quiet_fields(window: QuietWindow | None, due_at: datetime) -> dict:
    """The Message columns for a send due at ``due_at`` under ``window``: the window copied onto the
    message and, when ``due_at`` falls inside it, the moved ``due_at`` and ``quiet_deferred_from``."""
    fields: dict[str, time | datetime | str | None] = {
        "quiet_start": None,
        "quiet_end": None,
        "quiet_timezone": "",
        "quiet_deferred_from": None,
        "due_at": due_at,
    }
    if window is None:
        return fields
    fields.update(quiet_start=window.start, quiet_end=window.end, quiet_timezone=window.timezone)
    moved = window.defer(due_at)
    if moved is not None:
        fields.update(due_at=moved, quiet_deferred_from=due_at)
    return fields


def stored_window(message) -> QuietWindow | None:
    """The window copied onto a message (any object with the Message quiet_* fields), if any."""
    if not message.quiet_timezone:
        return None
    return QuietWindow(message.quiet_start, message.quiet_end, message.quiet_timezone)


def move_note(fields: dict) -> str:
    """The timeline sentence for a move, from ``quiet_fields``' output."""
    window = QuietWindow(fields["quiet_start"], fields["quiet_end"], fields["quiet_timezone"])
    return window.describe_move(fields["quiet_deferred_from"], fields["due_at"])


def quiet_details(message) -> dict:
    """Timeline details for a message's quiet hours: the window and, if it moved, how and why."""
    window = stored_window(message)
    if window is None:
        return {}
    details: dict[str, dict | str] = {"quiet_hours": window.as_dict()}
    if message.quiet_deferred_from is not None:
        details["quiet_hours_note"] = window.describe_move(message.quiet_deferred_from, message.due_at)
    return details
