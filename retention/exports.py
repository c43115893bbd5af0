"""Daily exports (docs/exports.md): per tenant, per UTC day, one gzip JSON-lines file of the messages that
became final that day, written through the export storage (``STORAGES["exports"]``), listed and
downloaded through ``GET /v1/exports``, and removed with its row after ``EXPORT_KEEP_DAYS``.

``exports_run`` is the one entry point; the retention job calls it (and ``manage.py exports_run``).

Kill-safety: the file is written whole to a local temporary file first, then saved into the storage
under a name of its own (the export's id), and only then is the ``Export`` row made. A run killed at any
point leaves no row, so the next run writes that day again; a file it left behind (a partial save) has no
row and is removed when the day is written again or pruned. Two runs at once write two files; the unique
(tenant, day) row lets one win, and the other removes its file.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import logging
import os
import posixpath
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import IO, Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.core.files import File
from django.core.files.storage import Storage, storages
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import Max, Min

from receipts.processor import DONE_AT_TOLERANCE
from retention.export_lines import day_bounds, export_line, finished_at_expression, finished_messages
from retention.horizons import content_days_for
from retention.models import Export, MessageHistory, RetentionAction, RetentionAudit, new_export_id
from scheduling.models import TERMINAL_STATUSES, Message
from smsgw.models import Tenant

log = logging.getLogger(__name__)

ACTOR = "retention"
# Tenant-days written per run, all tenants together (one day each in turn, so one tenant's backlog does
# not hold up the others): a first run over a month of history is spread over several runs.
EXPORT_RUN_DAYS = 60
# Exports removed per run: each is a storage call or two.
EXPORT_PRUNE_BATCH = 500
# A day is written once it has been over this long: a receipt may stamp a message final with its
# carrier's own time, up to DONE_AT_TOLERANCE before it arrives (receipts.processor), so a message can
# still become final "yesterday" for a few minutes after midnight.
EXPORT_AFTER = DONE_AT_TOLERANCE + timedelta(minutes=45)
_READ_SIZE = 1 << 20


def last_exportable_day(now: datetime) -> date:
    return (now - EXPORT_AFTER).astimezone(UTC).date() - timedelta(days=1)


def export_folder(*, tenant_id: int, day: date) -> str:
    return f"tenant-{tenant_id}/{day.isoformat()}"


def _storage() -> Storage:
    return storages["exports"]


def _content_kept(finished_at: datetime, *, now: datetime, content_days: int) -> bool:
    return now < finished_at + timedelta(days=content_days)


def _write_lines(out: IO[bytes], *, tenant: Tenant, day: date, now: datetime) -> int:
    """The day's lines, gzip-compressed into ``out``; returns how many. mtime 0 and no file name in the
    gzip header: the same messages give the same bytes (and sha256)."""
    content_days = content_days_for(tenant)
    rows = 0
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="") as gz:
        for row in finished_messages(tenant_id=tenant.pk, day=day, now=now):
            kept = row.content_kept and _content_kept(row.finished_at, now=now, content_days=content_days)
            line = export_line(row, content=kept)
            gz.write(json.dumps(line, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
            rows += 1
    return rows


def _digest(f: IO[bytes]) -> tuple[int, str]:
    f.seek(0)
    sha = hashlib.sha256()
    size = 0
    while chunk := f.read(_READ_SIZE):
        sha.update(chunk)
        size += len(chunk)
    f.seek(0)
    return size, sha.hexdigest()


def _folder_clear(storage: Storage, folder: str, *, keep: str = "") -> int:
    """Remove the files of one tenant-day folder but ``keep``: what a killed or losing run left."""
    try:
        _dirs, files = storage.listdir(folder)
    except (FileNotFoundError, NotImplementedError):
        return 0
    removed = 0
    for name in files:
        path = posixpath.join(folder, name)
        if path != keep:
            storage.delete(path)
            removed += 1
    return removed


def _folder_drop(storage: Storage, folder: str) -> None:
    """The emptied day folder itself, where the storage has folders (a local one; object storage has
    none, and ``path`` is not implemented there)."""
    with contextlib.suppress(NotImplementedError, OSError):
        os.rmdir(storage.path(folder))


def export_write(*, tenant: Tenant, day: date, now: datetime) -> Export | None:
    """Write one tenant's export of one day and record it; None when another run recorded it first."""
    storage = _storage()
    public_id = new_export_id()
    folder = export_folder(tenant_id=tenant.pk, day=day)
    with tempfile.TemporaryFile(prefix="smsgw-export-") as tmp:
        rows = _write_lines(tmp, tenant=tenant, day=day, now=now)
        size, sha256 = _digest(tmp)
        name = storage.save(f"{folder}/{public_id}.jsonl.gz", File(tmp))
    try:
        with transaction.atomic():
            export = Export.objects.create(
                public_id=public_id,
                tenant=tenant,
                day=day,
                name=name,
                rows=rows,
                size=size,
                sha256=sha256,
                created_at=now,
                expires_at=now + timedelta(days=settings.EXPORT_KEEP_DAYS),
            )
    except IntegrityError:
        storage.delete(name)
        return None
    _folder_clear(storage, folder, keep=name)
    return export


def _first_days(*, since: datetime, tenant_ids: list[int]) -> dict[int, date]:
    """Each of these tenants' first day with a final message at or after ``since``, from both tables.
    Asked by tenant (an index walk of (tenant, id) in each table, nothing for a tenant without
    messages), never as a scan of every finished message: the tenants asked are those without an export
    yet, nearly always new or idle ones."""
    if not tenant_ids:
        return {}
    live = (
        Message.objects.filter(tenant_id__in=tenant_ids, status__in=TERMINAL_STATUSES)
        .annotate(finished=finished_at_expression())
        .filter(finished__gte=since)
        .values("tenant_id")
        .annotate(first=Min("finished"))
    )
    moved = (
        MessageHistory.objects.filter(tenant_id__in=tenant_ids, finished_at__gte=since)
        .values("tenant_id")
        .annotate(first=Min("finished_at"))
    )
    first: dict[int, date] = {}
    for row in [*live, *moved]:
        day = row["first"].astimezone(UTC).date()
        first[row["tenant_id"]] = min(day, first.get(row["tenant_id"], day))
    return first


def _due_days(*, now: datetime, last: date) -> dict[int, date]:
    """Each tenant's next day to write, if it is at most ``last``: the day after its newest export; for
    a tenant without one, its first day with a final message, at most EXPORT_KEEP_DAYS back. The bound
    keeps a first run on an old installation to what an export would be kept for, and stops a tenant
    whose exports have all expired from being exported again from its oldest history."""
    newest = dict(
        Export.objects.values_list("tenant_id").annotate(Max("day")).values_list("tenant_id", "day__max")
    )
    due = {tenant_id: day + timedelta(days=1) for tenant_id, day in newest.items()}
    floor = now.astimezone(UTC).date() - timedelta(days=settings.EXPORT_KEEP_DAYS)
    without = list(Tenant.objects.exclude(pk__in=list(newest)).values_list("pk", flat=True))
    due |= _first_days(since=day_bounds(floor)[0], tenant_ids=without)
    return {tenant_id: day for tenant_id, day in due.items() if day <= last}


@dataclass
class Written:
    exports: list[Export] = field(default_factory=list)
    failed: int = 0  # tenant-days whose write failed (logged); each is tried again next pass


def _write_one(tenant: Tenant, day: date, now: datetime, written: Written) -> bool:
    """One tenant-day; False if it failed. A failure of one tenant's day (its storage refused a file, a
    bad row) is logged and that tenant waits for the next pass, so it holds up neither the other tenants
    nor the prune. A database outage or the task's time limit ends the pass."""
    try:
        export = export_write(tenant=tenant, day=day, now=now)
    except (DatabaseError, SoftTimeLimitExceeded):
        raise
    except Exception:
        log.exception("export failed: tenant %s, day %s; tried again next pass", tenant.pk, day)
        written.failed += 1
        return False
    if export is not None:
        written.exports.append(export)
    return True


def exports_write_due(*, now: datetime, max_days: int = EXPORT_RUN_DAYS) -> Written:
    """Write the due days' exports, every tenant one day in turn, at most ``max_days`` in all. Each day
    is a file, an empty one (zero lines) for a day without final messages: a tenant sees every day from
    its first on, and a missing day means not yet written."""
    last = last_exportable_day(now)
    due = _due_days(now=now, last=last)
    tenants = Tenant.objects.select_related("retention").in_bulk(list(due))
    written = Written()
    tries = 0
    while due and tries < max_days:
        for tenant_id in sorted(due):
            if tries >= max_days:
                break
            day = due[tenant_id]
            tries += 1
            if not _write_one(tenants[tenant_id], day, now, written) or day >= last:
                del due[tenant_id]
            else:
                due[tenant_id] = day + timedelta(days=1)
    return written


def exports_prune(*, now: datetime, limit: int = EXPORT_PRUNE_BATCH) -> int:
    """Remove the exports past ``expires_at``: the file (and anything else left in its day's folder) first,
    then the row with its audit entry. A run killed in between leaves the row, which the API no longer
    shows (it is expired) and the next run removes."""
    storage = _storage()
    expired = list(Export.objects.filter(expires_at__lte=now).order_by("expires_at", "id")[:limit])
    for export in expired:
        folder = export_folder(tenant_id=export.tenant_id, day=export.day)
        storage.delete(export.name)
        files = 1 + _folder_clear(storage, folder)
        _folder_drop(storage, folder)
        with transaction.atomic():
            Export.objects.filter(pk=export.pk).delete()
            RetentionAudit.objects.create(
                tenant_id=export.tenant_id,
                action=RetentionAction.EXPORT_PRUNE,
                actor=ACTOR,
                subject=export.public_id,
                counts={"exports": 1, "files": files, "rows": export.rows},
                created_at=now,
            )
    return len(expired)


def exports_run(*, now: datetime, max_days: int = EXPORT_RUN_DAYS) -> dict[str, Any]:
    """One pass: write what is due, then remove what expired (in that order, so a tenant's newest export,
    from which the next day is found, is never removed before its successor is written)."""
    written = exports_write_due(now=now, max_days=max_days)
    pruned = exports_prune(now=now)
    result = {
        "written": len(written.exports),
        "rows": sum(e.rows for e in written.exports),
        "tenants": len({e.tenant_id for e in written.exports}),
        "failed": written.failed,
        "pruned": pruned,
    }
    if written.exports or written.failed or pruned:
        log.info(
            "exports: %(written)d written (%(rows)d rows, %(tenants)d tenants), %(failed)d failed, "
            "%(pruned)d pruned",
            result,
        )
    return result
