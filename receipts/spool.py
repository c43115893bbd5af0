"""The receipt spool: signed callbacks that arrived while the database was unreachable, kept on local disk
until they can be stored.

Twilio does not retry a status callback that got an answer, 5xx included: by default only a connection
that could not be made is retried, once (twilio.com/docs/usage/webhooks/webhooks-connection-overrides,
``rc``/``rp=ct``). A 500 during a database outage therefore lost the receipt for good, and its message
stayed ``sent``. Instead the endpoint writes the parsed, redacted callback here and answers as usual.

* One file per callback, written atomically: a hidden temporary file in the same directory, fsync, then
  ``os.rename`` to its final name and an fsync of the directory, so a reader (or a crash) sees a whole
  file or none. The name starts with the arrival time, so the drain takes the oldest first.
* ``spool_drain`` stores each file with the same INSERT ... ON CONFLICT as a live callback (so one both
  spooled and delivered again is stored once) and deletes the file only after that insert committed. A
  crash between the two stores it again later: a duplicate, which the dedupe key absorbs.
* Idle cost: one ``os.scandir`` of an empty (or missing) directory.

The file holds what the ReceiptEvent would hold (numbers masked, no body), never the raw request.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.db import transaction

from delivery.providers.base import CallbackData
from receipts.ingest import receipt_ingest
from smsgw.http import unavailable

log = logging.getLogger(__name__)

SUFFIX = ".json"
BAD_SUFFIX = ".bad"  # a file that could not be read back: kept for an operator, never retried
# Bounded so one drain stays well under a second (one INSERT each) even after a long outage; the next
# run takes the next batch.
DRAIN_BATCH_SIZE = 500
# A temporary file this old belongs to a write that died before its rename: it never became a receipt.
STALE_TMP_SECONDS = 3600
# Lost-connection errors: the database did not answer. Anything else (a constraint, bad data) is a bug
# that spooling would only repeat at every drain. The same classes the API answers 503 for.
DB_UNAVAILABLE = unavailable.DB_UNAVAILABLE
connection_drop = unavailable.connection_drop
FORMAT = 1


class SpoolUnavailable(OSError):
    """The spool could not be written (disk full, read-only, permissions)."""


def spool_dir() -> Path:
    return Path(settings.RECEIPT_SPOOL_DIR)


def _record(provider: str, callback: CallbackData, received_at: datetime) -> dict:
    return {
        "format": FORMAT,
        "provider": provider,
        "provider_message_id": callback.provider_message_id,
        "raw_status": callback.raw_status,
        "normalized_status": callback.normalized_status,
        "error_code": callback.error_code,
        "done_at": callback.done_at.isoformat() if callback.done_at else None,
        "message_hint": callback.message_hint,
        "attempt_hint": callback.attempt_hint,
        "payload": callback.payload,
        "received_at": received_at.isoformat(),
    }


def _callback(record: dict) -> tuple[str, CallbackData, datetime]:
    done_at = record["done_at"]
    callback = CallbackData(
        provider_message_id=record["provider_message_id"],
        raw_status=record["raw_status"],
        normalized_status=record["normalized_status"],
        error_code=record["error_code"],
        done_at=datetime.fromisoformat(done_at) if done_at else None,
        message_hint=record["message_hint"],
        attempt_hint=record["attempt_hint"],
        payload=record["payload"],
    )
    return record["provider"], callback, datetime.fromisoformat(record["received_at"])


def receipt_spool(*, provider: str, callback: CallbackData, received_at: datetime) -> Path:
    """Write one callback durably; raises SpoolUnavailable when it could not be."""
    directory = spool_dir()
    name = f"{int(received_at.timestamp() * 1_000_000):020d}-{uuid.uuid4().hex}{SUFFIX}"
    data = json.dumps(_record(provider, callback, received_at), separators=(",", ":")).encode()
    tmp = directory / f".{name}.tmp"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, directory / name)
        _fsync_dir(directory)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise SpoolUnavailable(exc.errno, f"receipt spool {directory}: {exc.strerror or exc}") from exc
    return directory / name


def _fsync_dir(directory: Path) -> None:
    # The rename is durable only once the directory entry is on disk.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _pending(directory: Path) -> list[str]:
    names: list[str] = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.endswith(SUFFIX) and not entry.name.startswith("."):
                    names.append(entry.name)
                elif entry.name.endswith(".tmp"):
                    _remove_if_stale(entry)
    except FileNotFoundError:
        return []
    names.sort()  # arrival order
    return names


def _remove_if_stale(entry: os.DirEntry) -> None:
    with contextlib.suppress(OSError):
        if time.time() - entry.stat().st_mtime > STALE_TMP_SECONDS:
            os.unlink(entry.path)


def spool_drain(*, limit: int = DRAIN_BATCH_SIZE) -> int:
    """Store up to ``limit`` spooled callbacks, oldest first; returns how many files were taken off the
    spool. Stops at the first database error (the files stay for the next run). Safe to run in several
    processes at once: a file two drainers both read is stored once (dedupe key) and deleted once."""
    directory = spool_dir()
    names = _pending(directory)
    if not names:
        return 0
    done = 0
    for name in names[:limit]:
        path = directory / name
        try:
            provider, callback, received_at = _callback(json.loads(path.read_bytes()))
        except FileNotFoundError:
            continue  # another drainer took it
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("receipt spool: unreadable file %s kept as %s%s (%s)", name, name, BAD_SUFFIX, exc)
            with contextlib.suppress(OSError):
                os.rename(path, path.with_name(name + BAD_SUFFIX))
            continue
        try:
            with transaction.atomic():
                receipt_ingest(provider=provider, callback=callback, received_at=received_at)
        except DB_UNAVAILABLE as exc:
            log.warning("receipt spool: database unavailable, %d file(s) wait (%s)", len(names) - done, exc)
            connection_drop()
            break
        # Only now, with the row committed, may the file go.
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        done += 1
    if done:
        log.info("receipt spool: stored %d spooled receipt(s), %d left", done, len(names) - done)
    return done


# The web process drains too, because in production its spool is on its own host, where no receipts
# worker may run. Checked at most this often per process, so a busy endpoint pays one scandir a second.
WEB_DRAIN_EVERY_SECONDS = 1.0
WEB_DRAIN_BATCH_SIZE = 50  # bounded: it runs inside a request (after the callback itself was stored)
_last_web_drain = 0.0


def spool_drain_from_web() -> int:
    global _last_web_drain
    now = time.monotonic()
    if now - _last_web_drain < WEB_DRAIN_EVERY_SECONDS:
        return 0
    _last_web_drain = now
    return spool_drain(limit=WEB_DRAIN_BATCH_SIZE)
