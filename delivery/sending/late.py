"""New slots for paced submissions whose process woke up too late to send them at theirs.

A paced message waits in its send process's event loop for its slot (delivery.flow.pacing gives it one
from its sender's shared bucket). On two busy cores that loop can wake up a few hundred milliseconds
late, and then every slot it missed meanwhile goes out at once: at the provider, one sender's messages
arrive together and a 1-s window holds more than the sender's rate. So a request about to leave more
than ``LATE_SEND_SECONDS`` after its slot does not go; it asks for a new slot at the end of its sender's
line in the shared bucket (``pacing.late_reslot``, the same step that places a batch the broker handed over
late), and the bucket's next slot moves past it: the slot it missed stays empty (lost capacity), and no
other process's message of that sender is sent in the same instant.

The adapter asks from its event loop or its sending thread (``Submission.reslot``); this process's
reslot thread answers the asks in batches, one transaction for everything that woke up late together.
A request asks for new slots only until its claim's ``deadline`` (a quarter of the lease,
SMSGW_SENDING_LEASE_SECONDS, after the claim), and no new slot is further ahead than that again: it goes
within half the lease, which must not run out while the message waits. After the deadline, or when the
database cannot answer, it goes as it is (late rather than not at all).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import defaultdict
from concurrent.futures import Future
from dataclasses import dataclass

from django.db import connection

from delivery.flow import pacing
from delivery.sending.per_process import PerProcess

log = logging.getLogger(__name__)

LINGER_SECONDS = 0.005  # gather the asks of one late wake-up into one transaction
# A new slot is at least this far ahead: the answer still has to reach the event loop, which is running
# late (given "now", a busy loop would miss it again and ask again).
LEAD_SECONDS = 0.2
BATCH_MAX = 500
IDLE_SECONDS = 10.0  # the thread closes its database connection after this long without an ask


@dataclass(frozen=True)
class _Ask:
    provider: str
    account: str
    message_id: int
    sender: str
    segments: int
    missed: float  # the slot that passed
    deadline: float  # no new slot later than this (epoch seconds)
    answer: Future[float]


class Reslotter:
    """This process's late paced submissions (one per process; a forked child makes its own)."""

    def __init__(self) -> None:
        self.asks: queue.Queue[_Ask | None] = queue.Queue()  # None: stop
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def ask(
        self, *, provider: str, account: str, message_id: int, sender: str, segments: int, deadline: float
    ):
        """The hook for one submission (``Submission.reslot``): given the slot it missed, a future new
        slot (0: go as it is)."""

        def reslot(missed: float) -> Future[float]:
            answer: Future[float] = Future()
            self.asks.put(_Ask(provider, account, message_id, sender, segments, missed, deadline, answer))
            self._start()
            return answer

        return reslot

    def _start(self) -> None:
        if self.thread is not None and self.thread.is_alive():
            return
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="smsgw-reslot", daemon=True)
                self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Let the thread answer what it has, close its database connection and end (the next ask
        starts it again)."""
        thread = self.thread
        if thread is None or not thread.is_alive():
            return
        self.asks.put(None)
        thread.join(timeout)

    def _run(self) -> None:
        while True:
            try:
                first = self.asks.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                connection.close()
                continue
            if first is None:
                connection.close()
                return
            batch = [first]
            until = time.monotonic() + LINGER_SECONDS
            stopping = False
            while len(batch) < BATCH_MAX and (left := until - time.monotonic()) > 0:
                try:
                    ask = self.asks.get(timeout=left)
                except queue.Empty:
                    break
                if ask is None:
                    stopping = True
                    break
                batch.append(ask)
            self.answer(batch)
            if stopping:
                connection.close()
                return

    def answer(self, batch: list[_Ask]) -> None:
        groups: dict[tuple[str, str], list[_Ask]] = defaultdict(list)
        for ask in batch:
            groups[(ask.provider, ask.account)].append(ask)
        for (provider, account), asks in groups.items():
            now = time.time()
            asks.sort(key=lambda a: a.missed)
            # Past its deadline, an ask goes as it is. The others get slots no further ahead than the
            # latest deadline among them (one ask near its own deadline must not leave the rest of its
            # sender's asks without slots: they would all go at once).
            moving = [a for a in asks if a.deadline > now]
            slots: dict[int, float] = {}
            if moving:
                try:
                    slots = pacing.late_reslot(
                        provider,
                        account,
                        [(a.message_id, a.sender, a.segments) for a in moving],
                        horizon=max(a.deadline for a in moving) - now,
                        lead=LEAD_SECONDS,
                    )
                except Exception as exc:  # the database: these go as they are, late rather than never
                    log.error("late paced requests could not take new slots (%s)", type(exc).__name__)
                    connection.close()
            for a in asks:
                # An ask whose submission stopped waiting (RESLOT_WAIT_SECONDS) was cancelled: it went.
                if a.answer.set_running_or_notify_cancel():
                    a.answer.set_result(slots.get(a.message_id, 0.0))
            log.info(
                "%d paced requests woke up %.3f s after their first slot: %d take new slots",
                len(asks),
                now - asks[0].missed,
                len(slots),
            )


_reslotters: PerProcess[Reslotter] = PerProcess()


def reslotter() -> Reslotter:
    """This process's Reslotter (a forked child gets its own: threads do not survive a fork)."""
    return _reslotters.get(Reslotter)
