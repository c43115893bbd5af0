"""``celery -A config beat`` as Celery runs it, except for how it stops (config.celery.App.Beat selects this).

Celery's beat installs a SIGTERM/SIGINT handler that saves the schedule *inside the handler*
(celery/apps/beat.py, ``Beat.install_sync_handler``: ``service.sync()`` then ``raise SystemExit``). Python
runs a signal handler in the main thread between two bytecodes of whatever that thread was doing, and
beat's main thread spends much of its time in a database query: django-celery-beat's DatabaseScheduler
reads its change marker on every tick (``schedule_changed``) and writes entries on every sync. psycopg 3
holds the connection's lock, a non-reentrant ``threading.Lock``, for the whole of ``Cursor.execute``
(psycopg/cursor.py: ``with self._conn.lock:``) and returns to Python every 0.1 s while it waits for the
server (psycopg/connection.py, ``_WAIT_INTERVAL``). A SIGTERM that lands there runs the handler, whose
save (``ModelEntry.save``) executes on the same connection and waits for the lock its own thread holds:
beat never exits, whatever the database does next, until it is killed (seen: 2 stops in 3 under load
took a SIGKILL after 40 s; reproduced every time with the query held by a table lock, then released;
gdb showed the handler's ``Cursor.execute`` waiting in ``lock.__enter__`` under the interrupted one).

Here the handler only records when the stop was asked for and raises SystemExit. That unwinds the
interrupted work like Ctrl-C does (psycopg cancels a query it interrupts, within 5 s,
``Connection.wait``), and ``Service.start`` saves the schedule in its ``finally``, as it already did after
the handler's own save. That last save runs on a thread of its own (its own database connection) with a
deadline: a database that does not answer (a host gone, a server stopped mid-query) cannot hold the stop
beyond ``STOP_BUDGET_SECONDS``. What an unsaved schedule costs is one early tick at the next start
(``last_run_at`` of interval entries); every smsgw tick is idempotent.
"""

from __future__ import annotations

import logging
import threading
import time

from celery import beat, platforms
from celery.apps import beat as beat_app
from django.db import connections

log = logging.getLogger(__name__)

# From the stop signal to the end of the last schedule save: under the beat unit's TimeoutStopSec (15 s),
# and enough for one libpq connect timeout (SMSGW_DB_CONNECT_TIMEOUT, 5 s) plus the entries' writes.
STOP_BUDGET_SECONDS = 10.0
# The save gets at least this long even when unwinding the interrupted work used up the budget (a
# cancelled query: up to 10 s against a server that does not answer); a second signal ends it at once.
MIN_SAVE_SECONDS = 1.0


class Service(beat.Service):
    stop_requested_at: float | None = None

    def sync(self) -> None:
        """Save the schedule and release the broker connection (``Scheduler.close``), within the stop's
        budget; past it the process stops without the save."""
        started = time.monotonic()
        asked = self.stop_requested_at if self.stop_requested_at is not None else started
        budget = max(MIN_SAVE_SECONDS, STOP_BUDGET_SECONDS - (started - asked))
        done = threading.Event()

        def close() -> None:
            try:
                beat.Service.sync(self)
            except Exception as exc:  # the save is best effort at exit; say why it failed
                log.warning("beat: schedule not saved at stop (%s)", type(exc).__name__)
            finally:
                connections.close_all()  # this thread's own connection
                done.set()

        threading.Thread(target=close, name="beat-stop-save", daemon=True).start()
        if not done.wait(budget):
            log.warning(
                "beat: schedule not saved within %.0f s of the stop (database not answering); stopping "
                "without it",
                budget,
            )


class Beat(beat_app.Beat):
    Service = Service

    def install_sync_handler(self, service: beat.Service) -> None:
        """SIGTERM and SIGINT stop beat; the schedule is saved by ``Service.start`` on the way out, never
        from the handler (why: this module's docstring). No I/O, logging or lock in here: any of them
        may be what the signal interrupted."""

        def _stop(signum, frame) -> None:
            if isinstance(service, Service) and service.stop_requested_at is None:
                service.stop_requested_at = time.monotonic()
            raise SystemExit()

        platforms.signals.update(SIGTERM=_stop, SIGINT=_stop)
