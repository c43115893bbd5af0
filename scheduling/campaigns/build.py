"""Turning a campaign's recipient rows into message rows (the creation job's per-row stage,
``scheduling.campaign_make``): the number, the timezone, the body from the template, the segments, the
recipient's due time (cached per zone) and quiet hours. Pure Python, no database, so it can run in a
thread of its own beside the job's inserts."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import NamedTuple

from django.conf import settings
from django.utils import timezone

from scheduling.campaigns.rows import (
    Template,
    recipient_column,
    template_parse,
    zone_of_number,
)
from scheduling.dispatch import quiet
from scheduling.models import Campaign, CampaignError, CampaignTimeMode, Status, new_public_id
from smsgw.channels import DEFAULT_CHANNEL, AddressError
from smsgw.tenancy.priority import priority_capped
from smsgw.values.timeutil import (
    TimeResolutionError,
    check_window,
    parse_timezone,
    resolve_local,
    resolve_send_at,
)

DUPLICATE_MESSAGE = "already a recipient of this campaign: sent once"


@lru_cache(maxsize=4096)
def _zone_ok(name: str) -> bool:
    try:
        parse_timezone(name)
    except TimeResolutionError:
        return False
    return True


@dataclass
class _ZoneTime:
    """Everything about a recipient's time that depends only on its zone (cached per zone and batch)."""

    due: datetime | None
    error: str = ""
    local: datetime | None = None
    fields: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)


class RowBuilder:
    """Per-campaign state of the job: the parsed template and per-zone caches."""

    def __init__(self, campaign: Campaign):
        self.c = campaign
        self.tenant = campaign.tenant
        self.template: Template = template_parse(campaign.body, is_template=campaign.is_template)
        self.plain = None if campaign.is_template else DEFAULT_CHANNEL.cost(campaign.body)
        self.mode = campaign.time_mode
        self.default_zone = campaign.timezone or self.tenant.default_timezone or "UTC"
        self.validity = timedelta(seconds=campaign.validity_seconds)
        self.windows: dict[str, quiet.QuietWindow | None] = {}
        # Quiet hours are evaluated in each recipient's zone; without any window in play (and outside
        # recipient_local) the zone is not worked out per recipient at all.
        self.zones_needed = self.mode == CampaignTimeMode.RECIPIENT_LOCAL or self._window("UTC") is not None
        self.base_instant = None
        if self.mode in (CampaignTimeMode.INSTANT, CampaignTimeMode.LOCAL):
            zone = campaign.timezone or self.default_zone
            self.resolved = resolve_send_at(campaign.requested_send_at, zone, campaign.dst_policy, zone)
            self.base_instant = self.resolved.due_at

    def _window(self, zone: str) -> quiet.QuietWindow | None:
        if zone not in self.windows:
            self.windows[zone] = quiet.tenant_quiet_window(
                self.tenant, override=self.c.quiet_hours, recipient_timezone=zone, priority=self.c.priority
            )
        return self.windows[zone]

    def zone_time(self, zone: str, now: datetime) -> _ZoneTime:
        c = self.c
        details: dict = {"timezone": zone}
        local = None
        adjustment = "none"
        if self.mode == CampaignTimeMode.RECIPIENT_LOCAL:
            resolved = resolve_local(_naive(c.requested_send_at), zone, c.dst_policy)
            try:
                check_window(
                    resolved.due_at,
                    now=now,
                    past_tolerance_seconds=settings.SEND_AT_PAST_TOLERANCE_SECONDS,
                    max_ahead_days=settings.MAX_SCHEDULE_AHEAD_DAYS,
                )
            except TimeResolutionError as exc:
                return _ZoneTime(None, error=str(exc))
            due, local, adjustment = max(resolved.due_at, now), resolved.local_time, resolved.adjustment.value
            if adjustment != "none":
                details["dst_note"] = resolved.describe()
        elif self.base_instant is not None:
            due, local, adjustment = (
                max(self.base_instant, now),
                self.resolved.local_time,
                self.resolved.adjustment.value,
            )
            if adjustment != "none":
                details["dst_note"] = self.resolved.describe()
        else:
            due = now
        window = self._window(zone) if self.zones_needed else None
        qf = quiet.quiet_fields(window, due)
        if window is not None:
            details["quiet_hours"] = window.as_dict()
            if qf["quiet_deferred_from"] is not None:
                details["quiet_hours_note"] = window.describe_move(qf["quiet_deferred_from"], qf["due_at"])
        due = qf["due_at"]
        expires = due + self.validity
        details.update(dst_adjustment=adjustment, due_at=due.isoformat(), expires_at=expires.isoformat())
        fields = {
            "requested_local_time": timezone.make_aware(local, UTC) if local else None,
            "requested_timezone": self._requested_zone(zone),
            "dst_adjustment": adjustment,
            "due_at": due,
            "run_after": due,
            "expires_at": expires,
            "quiet_start": qf["quiet_start"],
            "quiet_end": qf["quiet_end"],
            "quiet_timezone": qf["quiet_timezone"],
            "quiet_deferred_from": qf["quiet_deferred_from"],
        }
        return _ZoneTime(due, local=local, fields=fields, details=details)

    def _requested_zone(self, zone: str) -> str:
        """What the message records as its requested timezone: the zone its wall time was read in."""
        if self.mode == CampaignTimeMode.RECIPIENT_LOCAL:
            return zone
        if self.base_instant is not None:
            return self.resolved.timezone
        return self.c.timezone

    def base_row(self, now: datetime) -> dict:
        c = self.c
        return {
            "tenant_id": c.tenant_id,
            "from_number": c.from_number,
            "sender_pool": c.sender_pool,
            "priority": priority_capped(self.tenant, c.priority),
            "metadata": c.metadata,
            "requested_send_at": c.requested_send_at,
            "dst_policy": c.dst_policy,
            "status": Status.SCHEDULED.value,
            "version": 1,
            "campaign_id": c.pk,
            "created_at": now,
            "updated_at": now,
        }


def _naive(text: str) -> datetime:
    return datetime.fromisoformat(text.strip()).replace(tzinfo=None)


@dataclass
class BuiltBatch:
    rows: list[tuple[dict, str]] = field(default_factory=list)  # (message row, details as JSON text)
    errors: list[CampaignError] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # line of each row
    skipped: int = 0
    read: int = 0
    last_line: int = 0
    # The list's recipient column (`to`, or `phone`, its deprecated alias): the field its errors name.
    recipient_field: str = "to"


def error_row(
    campaign_id: int, line: int, phone: str, field_name: str, code: str, message: str
) -> CampaignError:
    return CampaignError(
        campaign_id=campaign_id,
        line=line,
        phone=phone[:64],
        field=field_name[:64],
        code=code,
        message=message[:255],
    )


def rows_build(
    maker: RowBuilder, records: list[tuple[int, list[str] | None]], names: list[str], now: datetime
) -> BuiltBatch:
    """Message rows and per-row errors for one batch of records. The hot loop of a campaign: per row one
    number check, one substitution and dict building; everything that depends on the zone is cached."""
    rows = _Rows(maker, names, now)
    for line, fields in records:
        rows.add(line, fields)
    return rows.batch


class _Recipient(NamedTuple):
    """A record that passed its checks: what its message row is made of."""

    raw: str  # the number as the list wrote it (errors quote it)
    to: str
    zone: str  # the record's own timezone column, "" if none
    body: str
    encoding: str
    segments: int
    key: str  # the campaign key: the number, or the line when duplicates are allowed


class _Rows:
    """One batch's pass over its records, and what it caches across them."""

    def __init__(self, maker: RowBuilder, names: list[str], now: datetime) -> None:
        self.maker = maker
        self.now = now
        self.cid = maker.c.pk
        self.batch = BuiltBatch()
        self.base = maker.base_row(now)
        self.by_zone: dict[str, _ZoneTime] = {}
        self.names = names
        self.width = len(names)
        self.has_tz = "timezone" in names
        self.recipient = self.batch.recipient_field = recipient_column(names)
        self.keyed_by_line = maker.c.allow_duplicates
        self.seen: set[str] = set()
        self.campaign_details = {"source": "campaign", "campaign": maker.c.public_id}
        self.prefixes: dict[tuple[str, str], str] = {}
        self.template, self.plain, self.max_segments = maker.template, maker.plain, settings.MAX_SEGMENTS

    def _error(self, line: int, phone: str, field_name: str, code: str, message: str) -> None:
        self.batch.errors.append(error_row(self.cid, line, phone, field_name, code, message))

    def add(self, line: int, fields: list[str] | None) -> None:
        batch = self.batch
        batch.read += 1
        batch.last_line = line
        if fields is None:
            self._error(line, "", "row", "invalid_row", "the line is not valid CSV")
            return
        if not fields or (len(fields) == 1 and not fields[0].strip()):
            batch.read -= 1  # a blank line is not a recipient
            return
        if len(fields) > self.width:
            self._error(
                line, "", "row", "invalid_row", f"{len(fields)} values; the header names {self.width} columns"
            )
            return
        if "\x00" in "".join(fields):  # PostgreSQL cannot store a NUL in text (nor in an error row)
            self._error(line, "", "row", "invalid_row", "the line contains a NUL character")
            return
        recipient = self._recipient(line, dict(zip(self.names, fields, strict=False)))
        if recipient is not None:
            self._row(line, recipient)

    def _recipient(self, line: int, values: dict[str, str]) -> _Recipient | None:
        """The record's number, timezone, body and key, checked (None: an error row says why)."""
        raw = values.get(self.recipient, "").strip()
        try:
            to = DEFAULT_CHANNEL.address(raw)
        except AddressError as exc:
            self._error(line, raw, self.recipient, "invalid_number", str(exc))
            return None
        zone = values.get("timezone", "").strip() if self.has_tz else ""
        if zone and not _zone_ok(zone):
            self._error(line, raw, "timezone", "invalid_timezone", f"unknown timezone {zone[:64]!r}")
            return None
        try:
            body = self.template.render(values)
        except KeyError as exc:
            name = exc.args[0]
            self._error(line, raw, name, "missing_variable", f"no value for {{{name}}}")
            return None
        cost = self.plain or DEFAULT_CHANNEL.cost(body)
        encoding, segments = cost.encoding, cost.units
        if segments > (limit := self.max_segments):
            self._error(
                line, raw, "body", "too_long", f"the body needs {segments} segments; the limit is {limit}"
            )
            return None
        key = f"line:{line}" if self.keyed_by_line else to
        if not self.keyed_by_line:
            if to in self.seen:
                self._error(line, raw, self.recipient, "duplicate", DUPLICATE_MESSAGE)
                return None
            self.seen.add(to)
        return _Recipient(raw, to, zone, body, encoding, segments, key)

    def _row(self, line: int, r: _Recipient) -> None:
        """The message row, at its zone's due time (cached per zone), with its "created" entry's details."""
        maker = self.maker
        zone, source = r.zone, "row"
        if maker.zones_needed:
            if not zone:
                zone = zone_of_number(r.to) or ""
                source = "number" if zone else "default"
                zone = zone or maker.default_zone
        else:
            zone, source = maker.default_zone, "default"
        zt = self.by_zone.get(zone)
        if zt is None:
            zt = self.by_zone[zone] = maker.zone_time(zone, self.now)
        if zt.due is None:
            self._error(line, r.raw, "send_at", "send_at_passed", zt.error)
            return
        row = self.base.copy()
        row.update(zt.fields)
        row["public_id"] = new_public_id()
        row["to"] = r.to
        row["body"] = r.body
        row["encoding"] = r.encoding
        row["segments"] = r.segments
        row["campaign_key"] = r.key
        prefix = self.prefixes.get((zone, source))
        if prefix is None:
            # The "created" event's details as JSON text up to the line, built once per zone and source:
            # json.dumps per row was a tenth of the job's time.
            shared = {**self.campaign_details, **zt.details, "timezone_source": source}
            prefix = self.prefixes[(zone, source)] = json.dumps(shared)[:-1] + ', "line": '
        self.batch.rows.append((row, f"{prefix}{line}}}"))
        self.batch.lines.append(line)
