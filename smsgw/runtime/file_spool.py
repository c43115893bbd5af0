"""A folder of records that arrived while the database was unreachable (signed provider webhooks: status
receipts in receipts.spool, inbound messages in inbound.spool), kept on local disk until they are stored.

* One file per record, written atomically: a hidden temporary file in the same directory, fsync, then
  ``os.rename`` to its final name and an fsync of the directory, so a reader (or a crash) sees a whole
  file or none. The name starts with the arrival time, so a drain takes the oldest first.
* ``spool_drain`` stores each file with the caller's ``store`` (an INSERT ... ON CONFLICT, so a record
  both spooled and delivered again is stored once) and deletes the file only after that committed. A
  crash between the two stores it again later: a duplicate, which the store's unique key absorbs.
* Idle cost: one ``os.scandir`` of an empty (or missing) directory.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from django.db import transaction

from smsgw.http import unavailable

log = logging.getLogger(__name__)

SUFFIX = ".json"
BAD_SUFFIX = ".bad"  # a file that could not be read back: kept for an operator, never retried
# A temporary file this old belongs to a write that died before its rename: it never became a record.
STALE_TMP_SECONDS = 3600
# Lost-connection errors: the database did not answer. Anything else (a constraint, bad data) is a bug
# that spooling would only repeat at every drain. The same classes the API answers 503 for.
DB_UNAVAILABLE = unavailable.DB_UNAVAILABLE


class SpoolUnavailable(OSError):
    """The spool could not be written (disk full, read-only, permissions)."""


def spool_write(directory: Path, record: dict, received_at: datetime, *, what: str) -> Path:
    """Write one record durably; raises SpoolUnavailable when it could not be."""
    name = f"{int(received_at.timestamp() * 1_000_000):020d}-{uuid.uuid4().hex}{SUFFIX}"
    data = json.dumps(record, separators=(",", ":")).encode()
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
        raise SpoolUnavailable(exc.errno, f"{what} spool {directory}: {exc.strerror or exc}") from exc
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


def spool_drain(directory: Path, store: Callable[[dict], object], *, limit: int, what: str) -> int:
    """Store up to ``limit`` spooled records, oldest first, each in its own transaction; returns how many
    files were taken off the spool. Stops at the first database error (the files stay for the next run).
    Safe to run in several processes at once: a file two drainers both read is stored once (the store's
    unique key) and deleted once."""
    names = _pending(directory)
    if not names:
        return 0
    done = 0
    for name in names[:limit]:
        path = directory / name
        try:
            record = json.loads(path.read_bytes())
        except FileNotFoundError:
            continue  # another drainer took it
        except (OSError, ValueError) as exc:
            _set_aside(path, name, what, exc)
            continue
        try:
            with transaction.atomic():
                store(record)
        except DB_UNAVAILABLE as exc:
            log.warning("%s spool: database unavailable, %d file(s) wait (%s)", what, len(names) - done, exc)
            unavailable.connection_drop()
            break
        except (KeyError, TypeError, ValueError) as exc:
            _set_aside(path, name, what, exc)
            continue
        # Only now, with the row committed, may the file go.
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        done += 1
    if done:
        log.info("%s spool: stored %d spooled record(s), %d left", what, done, len(names) - done)
    return done


def _set_aside(path: Path, name: str, what: str, exc: Exception) -> None:
    log.error("%s spool: unreadable file %s kept as %s%s (%s)", what, name, name, BAD_SUFFIX, exc)
    with contextlib.suppress(OSError):
        os.rename(path, path.with_name(name + BAD_SUFFIX))


class WebDrain:
    """The web process drains too, because in production its spool is on its own host, where no worker
    may run. Checked at most every ``every`` seconds per process, so a busy endpoint pays one scandir a
    second, and bounded (``limit``): it runs inside a request, after that request's own record."""

    def __init__(self, drain: Callable[[int], int], *, every: float = 1.0, limit: int = 50) -> None:
        self.drain, self.every, self.limit, self.last = drain, every, limit, 0.0

    def __call__(self) -> int:
        now = time.monotonic()
        if now - self.last < self.every:
            return 0
        self.last = now
        return self.drain(self.limit)
