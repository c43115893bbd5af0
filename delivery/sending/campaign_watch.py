"""The last check before a paced campaign message is submitted: is its campaign still running?

A paced message is claimed (``sending``) up to a couple of seconds before its slot and then waits in the
adapter's event loop. A pause committed during that wait must still stop it, and the event loop may not
touch the database (Django refuses synchronous queries there). So each send process keeps a small view
of the campaigns it has submissions waiting for, refreshed by one thread every REFRESH_SECONDS with a
primary-key query; the event loop only reads the view. A campaign whose view is older than MAX_AGE_SECONDS
(the database cannot be reached) counts as halted: a pause must hold, and an unsent message only waits.

The claim itself (delivery.sending.worker) already excludes halted campaigns, so the view starts "running, as
of
the claim" for every campaign it is told about.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable

from django.db import connection

log = logging.getLogger(__name__)

REFRESH_SECONDS = 0.25  # a pause stops paced submissions within this (plus the query), well under 2 s
MAX_AGE_SECONDS = 1.0
# A campaign is watched this long after the last submission handed over for it (slots are at most a few
# seconds ahead of their claim: scheduling.dispatch.release, PACING_RELEASE_AHEAD_SECONDS).
LINGER_SECONDS = 30.0


class _View:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.until: dict[int, float] = {}  # campaign -> watched until (monotonic)
        self.checked: dict[int, float] = {}  # campaign -> last time it was seen running (monotonic)
        self.halted: dict[int, str] = {}  # campaign -> paused | cancelled
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()

    def watch(self, campaign_ids: Iterable[int]) -> None:
        now = time.monotonic()
        with self.lock:
            for cid in campaign_ids:
                self.until[cid] = now + LINGER_SECONDS
                if cid not in self.halted:
                    self.checked[cid] = now  # the claim just saw it running
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="campaign-watch", daemon=True)
                self.thread.start()

    def state(self, campaign_id: int) -> str:
        """``running``, ``paused``, ``cancelled``, or ``unknown`` (view too old)."""
        with self.lock:
            halted = self.halted.get(campaign_id)
            if halted:
                return halted
            checked = self.checked.get(campaign_id)
        if checked is None or time.monotonic() - checked > MAX_AGE_SECONDS:
            return "unknown"
        return "running"

    def _run(self) -> None:
        from scheduling.campaigns.gate import halted

        while not self.stopping.wait(REFRESH_SECONDS):
            now = time.monotonic()
            with self.lock:
                for cid in [c for c, until in self.until.items() if until < now]:
                    self.until.pop(cid, None)
                    self.checked.pop(cid, None)
                    self.halted.pop(cid, None)
                ids = list(self.until)
                if not ids:  # nothing waits: the thread ends (and its connection), the next watch starts one
                    self.thread = None
                    break
            try:
                found = halted(ids)
            except Exception:  # the database is away: the view ages, and an old view counts as halted
                log.warning("campaign watch: could not read campaign states", exc_info=True)
                connection.close()
                continue
            with self.lock:
                for cid in ids:
                    if cid in found:
                        self.halted[cid] = found[cid]
                    else:
                        self.halted.pop(cid, None)
                        self.checked[cid] = now
        connection.close()


_view = _View()


def _current() -> _View:
    global _view
    if _view.pid != os.getpid():  # a forked worker child: the parent's thread did not come along
        _view = _View()
    return _view


def watch(campaign_ids: Iterable[int | None]) -> None:
    ids = {cid for cid in campaign_ids if cid is not None}
    if ids:
        _current().watch(ids)


def running(campaign_id: int | None) -> bool:
    return campaign_id is None or _current().state(campaign_id) == "running"


def state(campaign_id: int) -> str:
    return _current().state(campaign_id)


def forget() -> None:
    """Tests: start from an empty view (the old one's thread ends and closes its connection)."""
    global _view
    old, _view = _view, _View()
    old.stopping.set()
    thread = old.thread
    if thread is not None:
        thread.join(5)
