"""The creation job of a campaign: reads the stored recipient list back chunk by chunk, turns each valid
row into a message row (``scheduling.campaigns.build``) and hands them, a bounded batch at a time, to the
one birth path (``scheduling.messages.birth.messages_birth``).

The list is split into line ranges (CampaignRange), each made by its own job, so a large list is made by
as many worker processes as the ``campaigns`` queue has: one process is one core (the build thread and
the insert share its GIL). Each range has its own checkpoint (``position``, the data rows it consumed).

Each batch is one transaction that also records its invalid rows (CampaignError) and moves its range's
checkpoint and the campaign's counts: a worker killed mid-batch loses the whole batch and the job,
delivered again (acks_late), skips exactly the rows already committed. A recipient key already there
(the number, or "line:<n>" with allow_duplicates) is left alone by INSERT ... ON CONFLICT DO NOTHING, so
no recipient ever gets a second message, whichever range reaches it first. Within a range the first
line of a number wins; across ranges, the range that commits it first (the counts are the same either
way).

A cancel or pause (which update the campaign's row) waits for the batches in flight, and a batch whose
campaign left ``creating`` before its end rolls back, so nothing is made after a cancel commits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from itertools import islice

from django.conf import settings
from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from scheduling.campaigns.build import DUPLICATE_MESSAGE, BuiltBatch, RowBuilder, error_row, rows_build
from scheduling.campaigns.rows import csv_records, decoded_lines
from scheduling.lifecycle.campaigns import campaign_transition
from scheduling.messages import acceptance
from scheduling.messages.birth import messages_birth
from scheduling.models import Campaign, CampaignError, CampaignRange, CampaignStatus, CampaignUpload
from smsgw.models import Tenant

log = logging.getLogger(__name__)

EVENT_ACTOR = "system:campaign"
OPTED_OUT_MESSAGE = "the recipient opted out of messages from this sender (suppression list)"


@dataclass
class MakeReport:
    batches: int = 0
    made: int = 0
    rejected: int = 0
    duplicates: int = 0
    skipped: int = 0
    finished: bool = False
    stopped: str = ""  # the campaign's status when the job stopped early (or "superseded", "done")
    position: int = 0  # data rows consumed, as committed (the checkpoint this run expects)
    range_index: int | None = None  # the range this run made
    ranges: int = 0  # the campaign's ranges
    range_done: bool = False  # this run read its range to the end


def destination_refusals(tenant: Tenant, numbers: list[str]) -> dict[str, tuple[str, str]]:
    """The numbers the destination guards refuse (delivery.guards.destinations: countries not allowed, denied
    premium-rate or high-risk ranges), as {number: (code, message)}; each becomes a CampaignError and is
    skipped, like an opt-out (the same rule as a single message's 400 naming `to`)."""
    return {n: (r.code, r.message) for n, r in acceptance.destination_refusals(tenant, numbers).items()}


def _drop_refused(maker: RowBuilder, batch: BuiltBatch) -> None:
    """Opted-out recipients (one query per batch) and guard refusals become errors and are skipped."""
    if not batch.rows:
        return
    c = maker.c
    numbers = [r["to"] for r, _ in batch.rows]
    suppressed = acceptance.suppressed_numbers(
        tenant_id=c.tenant_id,
        numbers=numbers,
        from_number=c.from_number,
        sender_pool=c.sender_pool,
    )
    refused = destination_refusals(maker.tenant, numbers)
    if not suppressed and not refused:
        return
    kept_rows, kept_lines = [], []
    for (row, details), line in zip(batch.rows, batch.lines, strict=True):
        if row["to"] in suppressed:
            batch.errors.append(
                error_row(
                    c.pk,
                    line,
                    row["to"],
                    batch.recipient_field,
                    "opted_out",
                    "the recipient opted out of this sender",
                )
            )
        elif row["to"] in refused:
            code, message = refused[row["to"]]
            batch.errors.append(error_row(c.pk, line, row["to"], batch.recipient_field, code, message))
        else:
            kept_rows.append((row, details))
            kept_lines.append(line)
            continue
        batch.skipped += 1
    batch.rows, batch.lines = kept_rows, kept_lines


def _records(campaign: Campaign) -> Iterator[tuple[int, list[str] | None]]:
    """(line, fields) of every data row, the header first, one stored chunk in memory at a time. For a
    JSON array the line is the item's position (1-based), not the re-encoded CSV's line."""
    seqs = list(
        CampaignUpload.objects.filter(campaign_id=campaign.pk).order_by("seq").values_list("seq", flat=True)
    )

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


def campaign_make(campaign_id: int, range_index: int | None = None) -> MakeReport:
    """Make the messages of a ``creating`` campaign, then mark it ``active``.

    ``range_index`` None is the campaign's job: the first time it splits the list into line ranges
    (``campaign_ranges``); every time it publishes a job for each unfinished range but one and makes that
    one here. An index is one range's job: from that range's checkpoint to its end. The campaign becomes
    ``active`` when its last range is done. Stops early (leaving the checkpoints) when the campaign is no
    longer ``creating``."""
    report = MakeReport(range_index=range_index)
    campaign = Campaign.objects.select_related("tenant").filter(pk=campaign_id).first()
    if campaign is None or campaign.status != CampaignStatus.CREATING:
        report.stopped = campaign.status if campaign else "missing"
        return report
    ranges = campaign_ranges(campaign)
    report.ranges = len(ranges)
    open_ranges = [r for r in ranges if not r.done]
    if range_index is not None:
        own = next((r for r in open_ranges if r.index == range_index), None)
        if own is None:  # a redelivered task of a range already done
            report.stopped = "done"
            return report
    elif not open_ranges:  # every range done, the campaign not yet marked (nothing normally leaves this)
        with transaction.atomic():
            _finish(campaign_id, report)
        return report
    else:
        from scheduling.campaigns.service import campaign_range_enqueue

        own = open_ranges[0]
        for other in open_ranges[1:]:
            campaign_range_enqueue(campaign_id, other.index)
        report.range_index = own.index
    _make_range(campaign, own, report)
    log.info(
        "campaign %s range %d/%d made=%d rejected=%d duplicates=%d skipped=%d%s",
        campaign.public_id,
        own.index + 1,
        len(ranges),
        report.made,
        report.rejected,
        report.duplicates,
        report.skipped,
        f" stopped={report.stopped}" if report.stopped else "",
    )
    return report


def campaign_ranges(campaign: Campaign) -> list[CampaignRange]:
    """The campaign's line ranges, planned on first use: the list is counted once (parsing is a small
    part of making) and cut into at most ``CAMPAIGN_MAKE_RANGES`` ranges of at least
    ``CAMPAIGN_RANGE_MIN_ROWS`` records each. A campaign whose job had already made rows before ranges
    existed keeps one range from its old checkpoint (``recipients_total``)."""
    ranges = list(CampaignRange.objects.filter(campaign_id=campaign.pk).order_by("index"))
    if ranges:
        return ranges
    bounds = _plan(campaign)
    with transaction.atomic():
        _lock(campaign.pk)  # two jobs planning at once: the second finds the first's plan
        ranges = list(CampaignRange.objects.filter(campaign_id=campaign.pk).order_by("index"))
        if ranges:
            return ranges
        position = campaign.recipients_total  # 0 unless made by a job from before ranges
        return CampaignRange.objects.bulk_create(
            [
                CampaignRange(
                    campaign_id=campaign.pk, index=i, first=first, end=end, position=first if i else position
                )
                for i, (first, end) in enumerate(bounds)
            ]
        )


def _plan(campaign: Campaign) -> list[tuple[int, int | None]]:
    """(first record, end) of each range; the last one's end is None (to the end of the list)."""
    most = settings.CAMPAIGN_MAKE_RANGES
    if most <= 1 or campaign.recipients_total:
        return [(0, None)]
    records = _records(campaign)
    next(records, None)  # the header
    total = sum(1 for _ in records)
    count = max(1, min(most, total // settings.CAMPAIGN_RANGE_MIN_ROWS))
    cuts = [total * i // count for i in range(count)]
    return [(cut, cuts[i + 1] if i + 1 < count else None) for i, cut in enumerate(cuts)]


def _make_range(campaign: Campaign, own: CampaignRange, report: MakeReport) -> None:
    maker = RowBuilder(campaign)
    records = _records(campaign)
    header = next(records, (1, None))[1] or []
    names = [h.strip() for h in header]
    # Skip what committed batches already consumed (a resumed job, or a range after the first): parsing
    # is cheap, making is not.
    report.position = own.position
    skipped_records = 0
    while skipped_records < report.position and next(records, None) is not None:
        skipped_records += 1
    if own.end is not None:
        records = islice(records, max(0, own.end - own.position))
    tenants = {campaign.tenant_id: campaign.tenant}
    size_limit = settings.CAMPAIGN_BATCH_SIZE  # rows per transaction (why: the setting's comment)
    # Two stages overlap: a thread builds batch N+1 (pure Python, no database) while this thread waits
    # for PostgreSQL to insert batch N (psycopg releases the GIL while it waits). Measured: the two
    # stages cost about the same per row, so the overlap nearly doubles the rate. At most one batch is
    # built ahead, so memory stays bounded; nothing of a built batch is kept unless its transaction
    # commits, so the checkpoint stays exact.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="campaign-build") as pool:
        chunk = list(islice(records, size_limit))
        pending = pool.submit(rows_build, maker, chunk, names, timezone.now()) if chunk else None
        while pending is not None:
            batch, size = pending.result(), len(chunk)
            chunk = list(islice(records, size_limit))
            pending = pool.submit(rows_build, maker, chunk, names, timezone.now()) if chunk else None
            if not _commit(maker, own, batch, size, tenants, report):
                if pending is not None:
                    pending.cancel()
                return
    _range_done(campaign.pk, own, report)


class _Halted(Exception):
    """The campaign left ``creating`` while a batch was being made: the batch rolls back."""


# Two ranges that hold the same numbers in opposite orders can each wait for the other's uncommitted
# insert (the unique recipient key): PostgreSQL ends the cycle by failing one transaction, which is
# then simply made again (it wrote nothing).
DEADLOCK_RETRIES = 5


def _commit(
    maker: RowBuilder, own: CampaignRange, batch: BuiltBatch, size: int, tenants: dict, report: MakeReport
) -> bool:
    for attempt in range(DEADLOCK_RETRIES):
        try:
            return _commit_once(
                maker,
                own,
                replace(batch, rows=list(batch.rows), errors=list(batch.errors), lines=list(batch.lines)),
                size,
                tenants,
                report,
            )
        except Exception as exc:  # a deadlock is made again; anything else goes on up as it was
            if attempt + 1 == DEADLOCK_RETRIES or not _deadlock(exc):
                raise
            log.info("campaign %s range %d: batch made again after a deadlock", maker.c.public_id, own.index)
    raise AssertionError("unreachable")


def _deadlock(exc: BaseException) -> bool:
    """PostgreSQL's deadlock, as Django wraps it (an OperationalError caused by it) or as it comes from a
    psycopg cursor of our own (``server_bound_cursor``: a birth's insert), which Django does not wrap."""
    from psycopg import errors

    return isinstance(exc, errors.DeadlockDetected) or isinstance(exc.__cause__, errors.DeadlockDetected)


def _commit_once(
    maker: RowBuilder, own: CampaignRange, batch: BuiltBatch, size: int, tenants: dict, report: MakeReport
) -> bool:
    """One batch in one transaction: its messages, its errors, the counts and the range's checkpoint.
    False (nothing written) when the campaign is no longer ``creating`` or another run of the same range
    is ahead.

    Locks: the range's row first (only another run of the same range waits on it), the campaign's row
    last, by the UPDATE of its counts, which is also the authoritative status check: a pause or cancel
    that committed meanwhile leaves it nothing to update, and the batch rolls back; one that comes later
    waits for this commit. So nothing is made after a cancel commits, and ranges running side by side hold
    the campaign's row only from their last statement to their commit."""
    campaign_id = maker.c.pk
    try:
        with transaction.atomic():
            if _superseded(own, report):
                return False
            status = _status(campaign_id)
            if status != CampaignStatus.CREATING:
                return _stop(campaign_id, status, report)
            now = timezone.now()
            _drop_refused(maker, batch)
            births = messages_birth(batch.rows, actor=EVENT_ACTOR, now=now, tenants=tenants)
            if births.existing:  # keys already there: an earlier batch, another range, or a re-run made them
                for (row, _), line in zip(batch.rows, batch.lines, strict=True):
                    if row["public_id"] not in births.id_of:
                        batch.errors.append(
                            error_row(
                                campaign_id,
                                line,
                                row["to"],
                                batch.recipient_field,
                                "duplicate",
                                DUPLICATE_MESSAGE,
                            )
                        )
            CampaignError.objects.bulk_create(batch.errors, ignore_conflicts=True)
            duplicates = sum(1 for e in batch.errors if e.code == "duplicate")
            rejected = len(batch.errors) - duplicates - batch.skipped
            moved = Campaign.objects.filter(pk=campaign_id, status=CampaignStatus.CREATING).update(
                recipients_total=F("recipients_total") + size,
                lines_read=Greatest(F("lines_read"), Value(batch.last_line)),
                messages_made=F("messages_made") + len(births.ids),
                rows_rejected=F("rows_rejected") + rejected,
                duplicates_skipped=F("duplicates_skipped") + duplicates,
                recipients_skipped=F("recipients_skipped") + batch.skipped,
                updated_at=now,
            )
            if not moved:
                raise _Halted
            CampaignRange.objects.filter(pk=own.pk).update(position=F("position") + size)
    except _Halted:
        return _stop(campaign_id, _status(campaign_id), report)
    report.batches += 1
    report.position += size
    report.made += len(births.ids)
    report.rejected += rejected
    report.duplicates += duplicates
    report.skipped += batch.skipped
    return True


def _superseded(own: CampaignRange, report: MakeReport) -> bool:
    """Lock the range's row (until the transaction ends) and tell whether another run of this range (a
    re-published task) committed past where this one stands: it owns the rest, and going on would count
    its rows a second time."""
    position = (
        CampaignRange.objects.select_for_update().filter(pk=own.pk).values_list("position", flat=True).first()
    )
    if position == report.position:
        return False
    report.stopped = "superseded"
    return True


def _status(campaign_id: int) -> str | None:
    return Campaign.objects.filter(pk=campaign_id).values_list("status", flat=True).first()


def _stop(campaign_id: int, status: str | None, report: MakeReport) -> bool:
    report.stopped = status or "missing"
    if status != CampaignStatus.PAUSED:  # a paused campaign's job continues on resume
        CampaignUpload.objects.filter(campaign_id=campaign_id).delete()
    return False


def _range_done(campaign_id: int, own: CampaignRange, report: MakeReport) -> None:
    """The range is read to its end: marked done, and when it is the last one, the campaign is made."""
    with transaction.atomic():
        if _superseded(own, report):
            return
        status = _lock(campaign_id)  # ranges finishing together: the last one to get here sees it
        if status not in (CampaignStatus.CREATING, CampaignStatus.PAUSED):
            _stop(campaign_id, status, report)
            return
        CampaignRange.objects.filter(pk=own.pk).update(done=True)
        report.range_done = True
        if CampaignRange.objects.filter(campaign_id=campaign_id, done=False).exists():
            if status == CampaignStatus.PAUSED:
                report.stopped = status
            return
        _finish(campaign_id, report)


def _lock(campaign_id: int) -> str | None:
    """The campaign's status, its row locked until the transaction ends."""
    return (
        Campaign.objects.select_for_update().filter(pk=campaign_id).values_list("status", flat=True).first()
    )


def _finish(campaign_id: int, report: MakeReport) -> None:
    """Every range is read to its end (inside the caller's transaction, the campaign's row locked)."""
    now = timezone.now()
    won = campaign_transition(
        campaign_id, from_status=CampaignStatus.CREATING, to_status=CampaignStatus.ACTIVE, now=now
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
        from scheduling.campaigns.service import campaign_make_enqueue

        Campaign.objects.filter(pk__in=stale).update(updated_at=now)  # once per stale period, not per tick
        for pk in stale:
            campaign_make_enqueue(pk)
        log.warning("campaign jobs re-published: %d campaigns creating without progress", len(stale))
    return stale


def campaign_fail(campaign_id: int, reason: str) -> None:
    """The job cannot go on (an error that is not the database's): the campaign says so. What was made
    stays made; its messages go on as usual."""
    campaign_transition(
        campaign_id,
        from_status=CampaignStatus.CREATING,
        to_status=CampaignStatus.FAILED,
        set_fields={"status_reason": reason[:255]},
    )
    CampaignUpload.objects.filter(campaign_id=campaign_id).delete()


__all__ = [
    "MakeReport",
    "campaign_fail",
    "campaign_make",
    "campaign_ranges",
    "campaigns_stale_republish",
    "destination_refusals",
]
