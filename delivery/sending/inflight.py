"""Submissions in flight in one worker process, and the recording of their outcomes as each completes.

A send task claims its batch and commits an Attempt per message (evidence before any provider call), then
hands the submissions to the adapter's event loop and returns: the worker slot is free again at once, so
a slow or hung request, or a paced message waiting for its slot, never holds a batch or a process. Each
answer is recorded as it arrives, in small groups, by this process's recorder thread (``sent`` within
milliseconds of the provider's answer). ``SMSGW_SEND_CONCURRENCY`` bounds what one process has in flight:
a task waits for room before it hands more over.

If the process dies with requests in flight, their messages stay ``sending`` with a pending attempt and
the lease expiry sends them to the reconciler, as for any crash: nothing is resent before the provider
has been asked. On a graceful stop (``worker_process_shutdown``) the process waits for its flight to land.

``wait=True`` (direct callers, tests) records the answers in the caller's own thread (its transaction
and connection), still one small group at a time as they arrive.
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection

from delivery.providers.base import ProviderAdapter, Submission, SubmitResult
from delivery.sending.per_process import PerProcess
from smsgw import tracing

log = logging.getLogger(__name__)

GROUP_MAX = 250  # answers recorded per group (one transaction); bounded so a group stays a few ms
GROUP_LINGER_SECONDS = 0.05  # wait this long for more answers before recording a group (fewer, larger groups)
RECORD_RETRY_SECONDS = 1.0  # the database refused a group (an outage): try again this often ...
RECORD_GIVE_UP_SECONDS = 600.0  # ... until then; the lease has long expired and the reconciler has it


@dataclass
class Pending:
    """One claimed message whose submission is in flight."""

    adapter: ProviderAdapter
    row: dict  # the claim row (id, version after the claim, ...)
    attempt: Any  # its Attempt, committed before the call
    submission: Submission
    probe: Any = None  # the hold this message probes, if any


# While paced submissions wait in this process for their slots, the GIL is handed between threads every
# 0.5 ms: with Python's default 5 ms, a busy main or recorder thread made the event loop wake 0.1-0.3 s
# late for a slot (a burst at the provider). Unpaced work keeps the default: frequent switching costs
# about a tenth of a send process's CPU.
PACED_SWITCH_INTERVAL = 0.0005
_switch_default: list[float] = []


def switch_interval_default(seconds: float) -> None:
    """The interval to go back to when nothing paced waits (called once per worker process)."""
    _switch_default[:] = [seconds]


Done = tuple[Pending, SubmitResult]
Recorder = Callable[[list[Done]], None]


def _groups(source: queue.Queue, first: Done, limit: int) -> list[Done]:
    group = [first]
    deadline = time.monotonic() + GROUP_LINGER_SECONDS
    while len(group) < limit:
        remaining = deadline - time.monotonic()
        try:
            group.append(source.get(timeout=remaining) if remaining > 0 else source.get_nowait())
        except queue.Empty:
            break
    return group


class Flight:
    """This process's submissions in flight (one per process; a forked child makes its own)."""

    def __init__(self, record: Recorder) -> None:
        self.record = record
        self.cond = threading.Condition()
        self.unpaced = 0
        self.paced = 0
        self.total = 0
        self.done: queue.Queue[Done] = queue.Queue()
        self.thread: threading.Thread | None = None

    # -- handing over ---------------------------------------------------------------------------------
    # ``total``: everything handed over and not yet recorded (a graceful stop waits for it). ``unpaced``:
    # those that go at once and have no answer yet, bounded by SMSGW_SEND_CONCURRENCY so a process never
    # has more on the wire than its connection pool (a task hands its batch over as room frees, answer by
    # answer: otherwise a burst would pile up here, claimed and no longer cancellable, and meet an outage
    # all at once). Room frees when an answer arrives, not when it is recorded: the wire stays full while
    # the recorder writes (before, a batch waited for the previous one's last answer to be recorded).
    # Paced ones wait for their slot in the event loop; they are bounded by how far ahead of its slot a
    # message is released.
    def _hand_over(self, adapter: ProviderAdapter, items: list[Pending], sink: queue.Queue) -> None:
        paced = [i for i in items if i.submission.not_before]
        unpaced = [i for i in items if not i.submission.not_before]
        with self.cond:
            self.total += len(items)
            if paced:
                if not self.paced and _switch_default:
                    sys.setswitchinterval(PACED_SWITCH_INTERVAL)
                self.paced += len(paced)
        if paced:
            self._start(adapter, paced, sink, counted=False)
        limit = max(int(settings.SEND_CONCURRENCY), 1)
        while unpaced:
            with self.cond:
                while self.unpaced >= limit:
                    self.cond.wait()
                room = limit - self.unpaced
                chunk, unpaced = unpaced[:room], unpaced[room:]
                self.unpaced += len(chunk)
            self._start(adapter, chunk, sink, counted=True)

    def _start(
        self, adapter: ProviderAdapter, items: list[Pending], sink: queue.Queue, *, counted: bool
    ) -> None:
        spans = [_request_span(adapter, item) for item in items] if tracing.enabled() else None

        def on_result(index: int, result: SubmitResult) -> None:
            if spans is not None:
                _request_span_end(spans[index], result)
            sink.put((items[index], result))
            with self.cond:
                if counted:
                    self.unpaced -= 1
                    self.cond.notify_all()
                else:
                    self.paced -= 1
                    if not self.paced and _switch_default:
                        sys.setswitchinterval(_switch_default[0])

        adapter.submit_each([i.submission for i in items], on_result)

    def _landed(self, group: list[Done]) -> None:
        with self.cond:
            self.total -= len(group)
            self.cond.notify_all()

    def submit(self, adapter: ProviderAdapter, items: list[Pending]) -> None:
        """Start the submissions; this process's recorder thread records each answer."""
        if not items:
            return
        self._recorder()
        self._hand_over(adapter, items, self.done)

    def submit_and_wait(self, adapter: ProviderAdapter, items: list[Pending]) -> Iterator[list[Done]]:
        """Start the submissions and yield their answers, a group at a time, as they arrive (the caller
        records them in its own thread)."""
        if not items:
            return
        sink: queue.Queue[Done] = queue.Queue()
        # Handed over from a thread: with more than the room, handing over waits for answers, which
        # this thread collects below.
        feeder = threading.Thread(target=self._hand_over, args=(adapter, items, sink), daemon=True)
        feeder.start()
        left = len(items)
        received: list[Done] = []
        try:
            while left:
                group = _groups(sink, sink.get(), min(GROUP_MAX, left))
                left -= len(group)
                received += group
                yield group
                self._landed(group)
        finally:
            if left:  # the caller gave up on the rest: count them as landed (their attempts stay pending)
                done = {id(p) for p, _ in received}
                self._landed([(p, None) for p in items if id(p) not in done])  # type: ignore[misc]

    # -- recording -------------------------------------------------------------------------------------
    def _recorder(self) -> None:
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self._record_forever, name="smsgw-outcomes", daemon=True)
            self.thread.start()

    def _record_forever(self) -> None:
        while True:
            group = _groups(self.done, self.done.get(), GROUP_MAX)
            self._record_group(group)
            self._landed(group)

    def _record_group(self, group: list[Done]) -> None:
        started = time.monotonic()
        while True:
            try:
                self.record(group)
                return
            except Exception as exc:
                # Typically the database is unreachable. The answers are kept and recorded when it is
                # back; the messages stay `sending` meanwhile (their lease and the reconciler cover a
                # process that dies before then). Only the error class: the text may carry values.
                log.error("recording %d outcomes failed (%s); retrying", len(group), type(exc).__name__)
                connection.close()
                if time.monotonic() - started > RECORD_GIVE_UP_SECONDS:
                    log.error("gave up recording %d outcomes; the reconciler will look them up", len(group))
                    return
                time.sleep(RECORD_RETRY_SECONDS)

    def drain(self, timeout: float) -> bool:
        """Wait until everything in flight has been recorded (a graceful stop). True when it has."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.total:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.cond.wait(remaining)
        return True


def _request_span(adapter: ProviderAdapter, item: Pending) -> tracing.Span:
    """The provider request's span, for every adapter: started as the submission is handed over (a paced
    one's includes its wait for the slot, ``smsgw.paced``), ended with its answer; a child of the send
    task's span, linked to the message's own trace (smsgw.tracing). Ids and the masked number only."""
    row = item.row
    return tracing.span_start(
        "provider request",
        kind=tracing.SpanKind.CLIENT,
        attributes={
            "smsgw.provider": adapter.name,
            "smsgw.message.id": row.get("public_id", ""),
            "smsgw.message.to": tracing.number_attribute(row.get("to")),
            "smsgw.attempt": getattr(item.attempt, "number", 0),
            "smsgw.paced": bool(item.submission.not_before),
        },
        links=[row.get("trace_context")],
    )


def _request_span_end(span: tracing.Span, result: SubmitResult) -> None:
    if not span.is_recording():
        return
    span.set_attribute("smsgw.outcome", str(result.outcome))
    span.set_attribute("smsgw.sent", result.sent)
    if result.provider_message_id:  # the provider's reference: a receipt names the message by it
        span.set_attribute("smsgw.provider_message_id", result.provider_message_id)
    if result.http_status is not None:
        span.set_attribute("http.response.status_code", result.http_status)
    if result.error_code:
        span.set_attribute("smsgw.provider_error_code", result.error_code)
    if result.error_class is not None:
        span.set_attribute("smsgw.error_class", str(result.error_class))
        span.set_status(tracing.StatusCode.ERROR, str(result.error_class))
    span.end()


_flights: PerProcess[Flight] = PerProcess()


def flight(record: Recorder) -> Flight:
    """This process's Flight (a forked child gets its own: threads do not survive a fork)."""
    return _flights.get(lambda: Flight(record))


def drain(timeout: float) -> bool:
    current = _flights.current()
    return True if current is None else current.drain(timeout)
