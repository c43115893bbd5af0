"""The creation job of a campaign: reads the stored recipient list back chunk by chunk, turns each valid
row into a message row (``scheduling.campaigns.build``) and hands them, a bounded batch at a time, to the
one birth path (``scheduling.messages.birth.messages_birth``).

Each batch is one transaction that also records its invalid rows (CampaignError) and moves the
checkpoint (``recipients_total``, the number of data rows consumed) and the counts: a worker killed
mid-batch loses the whole batch and the job, delivered again (acks_late), skips exactly the rows
already committed. A recipient key already there (the number, or "line:<n>" with allow_duplicates) is
left alone by INSERT ... ON CONFLICT DO NOTHING, so no recipient ever gets a second message.

The campaign row is locked at the start of each batch: a cancel or pause (which update that row)
waits for the batch in flight and the next batch sees it, so nothing is made after a cancel commits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from scheduling.campaigns.build import DUPLICATE_MESSAGE, BuiltBatch, RowBuilder, error_row, rows_build
from scheduling.campaigns.rows import csv_records, decoded_lines
from scheduling.lifecycle.campaigns import campaign_transition
from scheduling.messages import acceptance
from scheduling.messages.birth import messages_birth
from scheduling.models import Campaign, CampaignError, CampaignStatus, CampaignUpload
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
    stopped: str = ""  # the campaign's status when the job stopped early (or "superseded")
    position: int = 0  # data rows consumed, as committed (the checkpoint this run expects)


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
        messaging_service_sid=c.messaging_service_sid,
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


def campaign_make(campaign_id: int) -> MakeReport:
    """Make the messages of a ``creating`` campaign from its checkpoint on, then mark it ``active``.
    Stops early (leaving the checkpoint) when the campaign is no longer ``creating``."""
    report = MakeReport()
    campaign = Campaign.objects.select_related("tenant").filter(pk=campaign_id).first()
    if campaign is None or campaign.status != CampaignStatus.CREATING:
        report.stopped = campaign.status if campaign else "missing"
        return report
    maker = RowBuilder(campaign)
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
        pending = pool.submit(rows_build, maker, chunk, names, timezone.now()) if chunk else None
        while pending is not None:
            batch, size = pending.result(), len(chunk)
            chunk = list(islice(records, size_limit))
            pending = pool.submit(rows_build, maker, chunk, names, timezone.now()) if chunk else None
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


def _commit(maker: RowBuilder, batch: BuiltBatch, size: int, tenants: dict, report: MakeReport) -> bool:
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
    "campaigns_stale_republish",
    "destination_refusals",
]
