"""The creation job of a campaign: reads the stored recipient list back chunk by chunk, turns each valid
row into a message row and hands them, a bounded batch at a time, to the one birth path
(``scheduling.birth.messages_birth``).

Each batch is one transaction that also records its invalid rows (CampaignError) and moves the
checkpoint (``recipients_total``, the number of data rows consumed) and the counts: a worker killed
mid-batch loses the whole batch and the job, delivered again (acks_late), skips exactly the rows
already committed. A recipient key already there (the number, or "line:<n>" with allow_duplicates) is
left alone by INSERT ... ON CONFLICT DO NOTHING, so no recipient ever gets a second message.

The campaign row is locked at the start of each batch: a cancel or pause (which update that row)
waits for the batch in flight and the next batch sees it, so nothing is made after a cancel commits.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache
from itertools import islice

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from delivery import suppression
from scheduling import quiet
from scheduling.birth import messages_birth
from scheduling.campaign_rows import (
    Template,
    csv_records,
    decoded_lines,
    segments_of,
    template_parse,
    zone_of_number,
)
from scheduling.models import (
    Campaign,
    CampaignError,
    CampaignStatus,
    CampaignTimeMode,
    CampaignUpload,
    Status,
    new_public_id,
)
from scheduling.phone import PhoneNumberError, normalize_e164
from scheduling.timeutil import (
    TimeResolutionError,
    check_window,
    parse_timezone,
    resolve_local,
    resolve_send_at,
)
from smsgw.models import Tenant

log = logging.getLogger(__name__)

EVENT_ACTOR = "system:campaign"
DUPLICATE_MESSAGE = "already a recipient of this campaign: sent once"


@dataclass
class MakeReport:
    batches: int = 0
    made: int = 0
    rejected: int = 0
    duplicates: int = 0
    skipped: int = 0
    finished: bool = False
    stopped: str = ""  # the campaign's status when the job stopped early (or "superseded")
    position: int = 0  # data rows consumed, as committed (the checkpoint this run expects)


def destination_refusals(tenant: Tenant, numbers: list[str]) -> dict[str, tuple[str, str]]:
    """HOOK (destination guards, issue 12 §3, wired by the lead at merge): the numbers a guard refuses,
    as {number: (code, message)}; each becomes a CampaignError and is skipped, like an opt-out. The
    guards module provides ``delivery.guards.destination_refusals(tenant, numbers)`` with that shape
    (Refusal(code, message)); until then nothing is refused."""
    return {}


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


class _Maker:
    """Per-campaign state of the job: the parsed template and per-zone caches."""

    def __init__(self, campaign: Campaign):
        self.c = campaign
        self.tenant = campaign.tenant
        self.template: Template = template_parse(campaign.body, is_template=campaign.is_template)
        self.plain = None if campaign.is_template else segments_of(campaign.body)
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
            "requested_local_time": timezone.make_aware(local, timezone.UTC) if local else None,
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
            "messaging_service_sid": c.messaging_service_sid,
            "priority": c.priority,
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
class _Batch:
    rows: list[tuple[dict, str]] = field(default_factory=list)  # (message row, details as JSON text)
    errors: list[CampaignError] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # line of each row
    skipped: int = 0
    read: int = 0
    last_line: int = 0


def _error(
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


def _build(
    maker: _Maker, records: list[tuple[int, list[str] | None]], names: list[str], now: datetime
) -> _Batch:
    """Message rows and per-row errors for one batch of records. The hot loop of a campaign: per row one
    number check, one substitution and dict building; everything that depends on the zone is cached."""
    c = maker.c
    cid = c.pk
    batch = _Batch()
    base = maker.base_row(now)
    by_zone: dict[str, _ZoneTime] = {}
    template, plain, max_segments = maker.template, maker.plain, settings.MAX_SEGMENTS
    width = len(names)
    has_tz = "timezone" in names
    keyed_by_line = c.allow_duplicates
    seen: set[str] = set()
    campaign_details = {"source": "campaign", "campaign": c.public_id}
    prefixes: dict[tuple[str, str], str] = {}
    errors = batch.errors
    for line, fields in records:
        batch.read += 1
        batch.last_line = line
        if fields is None:
            errors.append(_error(cid, line, "", "row", "invalid_row", "the line is not valid CSV"))
            continue
        if not fields or (len(fields) == 1 and not fields[0].strip()):
            batch.read -= 1  # a blank line is not a recipient
            continue
        if len(fields) > width:
            errors.append(
                _error(
                    cid,
                    line,
                    "",
                    "row",
                    "invalid_row",
                    f"{len(fields)} values; the header names {width} columns",
                )
            )
            continue
        if "\x00" in "".join(fields):  # PostgreSQL cannot store a NUL in text (nor in an error row)
            errors.append(_error(cid, line, "", "row", "invalid_row", "the line contains a NUL character"))
            continue
        values = dict(zip(names, fields, strict=False))
        raw = values.get("phone", "").strip()
        try:
            to = normalize_e164(raw)
        except PhoneNumberError as exc:
            errors.append(_error(cid, line, raw, "phone", "invalid_number", str(exc)))
            continue
        zone = values.get("timezone", "").strip() if has_tz else ""
        if zone and not _zone_ok(zone):
            errors.append(
                _error(cid, line, raw, "timezone", "invalid_timezone", f"unknown timezone {zone[:64]!r}")
            )
            continue
        try:
            body = template.render(values)
        except KeyError as exc:
            name = exc.args[0]
            errors.append(_error(cid, line, raw, name, "missing_variable", f"no value for {{{name}}}"))
            continue
        encoding, segments = plain or segments_of(body)
        if segments > max_segments:
            errors.append(
                _error(
                    cid,
                    line,
                    raw,
                    "body",
                    "too_long",
                    f"the body needs {segments} segments; the limit is {max_segments}",
                )
            )
            continue
        key = f"line:{line}" if keyed_by_line else to
        if not keyed_by_line:
            if to in seen:
                errors.append(_error(cid, line, raw, "phone", "duplicate", DUPLICATE_MESSAGE))
                continue
            seen.add(to)
        source = "row"
        if maker.zones_needed:
            if not zone:
                zone = zone_of_number(to) or ""
                source = "number" if zone else "default"
                zone = zone or maker.default_zone
        else:
            zone, source = maker.default_zone, "default"
        zt = by_zone.get(zone)
        if zt is None:
            zt = by_zone[zone] = maker.zone_time(zone, now)
        if zt.due is None:
            errors.append(_error(cid, line, raw, "send_at", "send_at_passed", zt.error))
            continue
        row = base.copy()
        row.update(zt.fields)
        row["public_id"] = new_public_id()
        row["to"] = to
        row["body"] = body
        row["encoding"] = encoding
        row["segments"] = segments
        row["campaign_key"] = key
        prefix = prefixes.get((zone, source))
        if prefix is None:
            # The "created" event's details as JSON text up to the line, built once per zone and source:
            # json.dumps per row was a tenth of the job's time.
            shared = {**campaign_details, **zt.details, "timezone_source": source}
            prefix = prefixes[(zone, source)] = json.dumps(shared)[:-1] + ', "line": '
        batch.rows.append((row, f"{prefix}{line}}}"))
        batch.lines.append(line)
    return batch


def _drop_refused(maker: _Maker, batch: _Batch) -> None:
    """Opted-out recipients (one query per batch) and guard refusals become errors and are skipped."""
    if not batch.rows:
        return
    c = maker.c
    numbers = [r["to"] for r, _ in batch.rows]
    suppressed = suppression.suppressed_numbers(
        tenant_id=c.tenant_id,
        numbers=numbers,
        from_number=c.from_number,
        messaging_service_sid=c.messaging_service_sid,
    )
    refused = destination_refusals(maker.tenant, numbers)
    if not suppressed and not refused:
        return
    kept_rows, kept_lines = [], []
    for (row, details), line in zip(batch.rows, batch.lines, strict=True):
        if row["to"] in suppressed:
            batch.errors.append(
                _error(c.pk, line, row["to"], "phone", "opted_out", "the recipient opted out of this sender")
            )
        elif row["to"] in refused:
            code, message = refused[row["to"]]
            batch.errors.append(_error(c.pk, line, row["to"], "phone", code, message))
        else:
            kept_rows.append((row, details))
            kept_lines.append(line)
            continue
        batch.skipped += 1
    batch.rows, batch.lines = kept_rows, kept_lines


def _records(campaign: Campaign) -> Iterator[tuple[int, list[str] | None]]:
    """(line, fields) of every data row, the header first, one stored chunk in memory at a time. For a
    JSON array the line is the item's position (1-based), not the re-encoded CSV's line."""
    seqs = (
        CampaignUpload.objects.filter(campaign_id=campaign.pk).order_by("seq").values_list("seq", flat=True)
    )
    seqs = list(seqs)

    def chunks() -> Iterator[bytes]:
        for seq in seqs:
            data = (
                CampaignUpload.objects.filter(campaign_id=campaign.pk, seq=seq)
                .values_list("data", flat=True)
                .first()
            )
            if data is not None:
                yield bytes(data)

    records = csv_records(decoded_lines(chunks()))
    if campaign.source_format == "json":
        yield from ((0, f) if i == 0 else (i, f) for i, (_, f) in enumerate(records))
    else:
        yield from records


def campaign_make(campaign_id: int) -> MakeReport:
    """Make the messages of a ``creating`` campaign from its checkpoint on, then mark it ``active``.
    Stops early (leaving the checkpoint) when the campaign is no longer ``creating``."""
    report = MakeReport()
    campaign = Campaign.objects.select_related("tenant").filter(pk=campaign_id).first()
    if campaign is None or campaign.status != CampaignStatus.CREATING:
        report.stopped = campaign.status if campaign else "missing"
        return report
    maker = _Maker(campaign)
    records = _records(campaign)
    header = next(records, (1, None))[1] or []
    names = [h.strip() for h in header]
    # Skip what committed batches already consumed (a resumed job): parsing is cheap, making is not.
    report.position = campaign.recipients_total
    skipped_records = 0
    while skipped_records < report.position and next(records, None) is not None:
        skipped_records += 1
    tenants = {campaign.tenant_id: campaign.tenant}
    size_limit = settings.CAMPAIGN_BATCH_SIZE  # rows per transaction (why: the setting's comment)
    # Two stages overlap: a thread builds batch N+1 (pure Python, no database) while this thread waits
    # for PostgreSQL to insert batch N (psycopg releases the GIL while it waits). Measured: the two
    # stages cost about the same per row, so the overlap nearly doubles the rate. At most one batch is
    # built ahead, so memory stays bounded; nothing of a built batch is kept unless its transaction
    # commits, so the checkpoint stays exact.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="campaign-build") as pool:
        chunk = list(islice(records, size_limit))
        pending = pool.submit(_build, maker, chunk, names, timezone.now()) if chunk else None
        while pending is not None:
            batch, size = pending.result(), len(chunk)
            chunk = list(islice(records, size_limit))
            pending = pool.submit(_build, maker, chunk, names, timezone.now()) if chunk else None
            if not _commit(maker, batch, size, tenants, report):
                if pending is not None:
                    pending.cancel()
                return report
    _finish(campaign_id, report)
    log.info(
        "campaign %s made=%d rejected=%d duplicates=%d skipped=%d",
        campaign.public_id,
        report.made,
        report.rejected,
        report.duplicates,
        report.skipped,
    )
    return report


def _commit(maker: _Maker, batch: _Batch, size: int, tenants: dict, report: MakeReport) -> bool:
    """One batch in one transaction: its messages, its errors and the checkpoint. False (nothing
    written) when the campaign is no longer ``creating``."""
    campaign_id = maker.c.pk
    with transaction.atomic():
        status, position = _lock_position(campaign_id)
        if status == CampaignStatus.CREATING and position != report.position:
            # Another run of this job (a re-published task) committed past where this one stands: it
            # owns the rest; going on would count its rows a second time.
            report.stopped = "superseded"
            return False
        if status != CampaignStatus.CREATING:
            report.stopped = status or "missing"
            if status != CampaignStatus.PAUSED:  # a paused campaign's job continues on resume
                CampaignUpload.objects.filter(campaign_id=campaign_id).delete()
            return False
        now = timezone.now()
        _drop_refused(maker, batch)
        births = messages_birth(batch.rows, actor=EVENT_ACTOR, now=now, tenants=tenants)
        if births.existing:  # keys already there: an earlier batch (or a re-run) made them
            for (row, _), line in zip(batch.rows, batch.lines, strict=True):
                if row["public_id"] not in births.inserted_public_ids:
                    batch.errors.append(
                        _error(campaign_id, line, row["to"], "phone", "duplicate", DUPLICATE_MESSAGE)
                    )
        CampaignError.objects.bulk_create(batch.errors, ignore_conflicts=True)
        duplicates = sum(1 for e in batch.errors if e.code == "duplicate")
        rejected = len(batch.errors) - duplicates - batch.skipped
        Campaign.objects.filter(pk=campaign_id).update(
            recipients_total=F("recipients_total") + size,
            lines_read=batch.last_line,
            messages_made=F("messages_made") + len(births.ids),
            rows_rejected=F("rows_rejected") + rejected,
            duplicates_skipped=F("duplicates_skipped") + duplicates,
            recipients_skipped=F("recipients_skipped") + batch.skipped,
            updated_at=now,
        )
    report.batches += 1
    report.position += size
    report.made += len(births.ids)
    report.rejected += rejected
    report.duplicates += duplicates
    report.skipped += batch.skipped
    return True


def _lock(campaign_id: int) -> str | None:
    return _lock_position(campaign_id)[0]


def _lock_position(campaign_id: int) -> tuple[str | None, int]:
    """The campaign's status and checkpoint, its row locked until the transaction ends."""
    row = (
        Campaign.objects.select_for_update().filter(pk=campaign_id).values_list("status", "recipients_total")
    )
    return row.first() or (None, 0)


def _finish(campaign_id: int, report: MakeReport) -> None:
    now = timezone.now()
    with transaction.atomic():
        won = Campaign.objects.filter(pk=campaign_id, status=CampaignStatus.CREATING).update(
            status=CampaignStatus.ACTIVE, made_at=now, updated_at=now, version=F("version") + 1
        )
        if not won:
            report.stopped = _lock(campaign_id) or "missing"
            Campaign.objects.filter(pk=campaign_id, made_at__isnull=True).update(made_at=now)
        # The list was read to its end: its copy is no longer needed (nor kept: it holds numbers).
        CampaignUpload.objects.filter(campaign_id=campaign_id).delete()
    report.finished = True


# A creation job commits a batch every second or so; a `creating` campaign untouched for this long has
# lost its task (the broker was down when it was published, or the message was lost). Re-publishing is
# safe: a second run of a job stops as soon as it sees the first one ahead of it ("superseded").
CAMPAIGN_STALE_SECONDS = 300


def campaigns_stale_republish(*, now: datetime | None = None) -> list[int]:
    """Publish the creation job again for every `creating` campaign whose job shows no sign of life
    (one probe of the cmp_open index)."""
    now = now or timezone.now()
    stale = list(
        Campaign.objects.filter(
            status=CampaignStatus.CREATING, updated_at__lt=now - timedelta(seconds=CAMPAIGN_STALE_SECONDS)
        ).values_list("pk", flat=True)[:100]
    )
    if stale:
        from scheduling.campaigns import campaign_make_enqueue

        Campaign.objects.filter(pk__in=stale).update(updated_at=now)  # once per stale period, not per tick
        for pk in stale:
            campaign_make_enqueue(pk)
        log.warning("campaign jobs re-published: %d campaigns creating without progress", len(stale))
    return stale


def campaign_fail(campaign_id: int, reason: str) -> None:
    """The job cannot go on (an error that is not the database's): the campaign says so. What was made
    stays made; its messages go on as usual."""
    Campaign.objects.filter(pk=campaign_id, status=CampaignStatus.CREATING).update(
        status=CampaignStatus.FAILED, status_reason=reason[:255], updated_at=timezone.now()
    )
    CampaignUpload.objects.filter(campaign_id=campaign_id).delete()


__all__ = [
    "MakeReport",
    "campaign_fail",
    "campaign_make",
    "campaigns_stale_republish",
    "destination_refusals",
]
