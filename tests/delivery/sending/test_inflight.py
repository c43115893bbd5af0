"""Flow control in one send process: at most SMSGW_SEND_CONCURRENCY submissions on the wire, and room
frees as each answer arrives (not when its group is recorded), so the wire stays full while the recorder
writes. A provider here is a stand-in that answers when told: the subject is the flow, not the wire."""

from __future__ import annotations

import threading
import time

from delivery.providers.base import Outcome, Submission, SubmitResult
from delivery.sending import inflight
from tests.waiting import wait_for


class HeldProvider:
    """Starts submissions and keeps them open until ``answer(n)``; records what is on the wire."""

    name = "held"

    def __init__(self) -> None:
        self.open: list = []
        self.started = 0
        self.lock = threading.Lock()

    def submit_each(self, submissions, on_result) -> None:
        with self.lock:
            self.started += len(submissions)
            self.open += [(on_result, i) for i in range(len(submissions))]

    def answer(self, n: int) -> None:
        with self.lock:
            due, self.open = self.open[:n], self.open[n:]
        for on_result, index in due:
            on_result(index, SubmitResult(outcome=Outcome.ACCEPTED, provider_message_id="SM1"))


def until(predicate) -> None:
    wait_for(predicate, 10.0, "the flight to reach that state", interval=0.005)


def pending(i: int, not_before: float = 0.0) -> inflight.Pending:
    submission = Submission(i, "+1555", "x", not_before=not_before)
    return inflight.Pending(adapter=None, row={"id": i}, attempt=None, submission=submission)


def test_room_frees_per_answer_while_recording_is_still_busy(settings):
    settings.SEND_CONCURRENCY = 4
    recording = threading.Event()
    recorded: list[int] = []

    def slow_record(group):
        recording.wait(10)  # the database is slow: nothing is recorded until released
        recorded.extend(p.row["id"] for p, _ in group)

    flight = inflight.Flight(slow_record)
    provider = HeldProvider()
    task = threading.Thread(target=flight.submit, args=(provider, [pending(i) for i in range(10)]))
    task.start()
    until(lambda: provider.started == 4)
    assert provider.started == 4 and len(provider.open) == 4, "never more than the room on the wire"
    provider.answer(3)  # answered, not recorded (the recorder is blocked)
    until(lambda: provider.started == 7)
    assert len(provider.open) == 4 and recorded == []
    provider.answer(4)
    until(lambda: provider.started == 10)
    task.join(10)
    assert not task.is_alive(), "the task returns once its batch is handed over"
    provider.answer(3)
    recording.set()
    assert flight.drain(10) and sorted(recorded) == list(range(10))


def test_the_gil_switches_often_only_while_paced_submissions_wait(settings):
    import sys

    default = sys.getswitchinterval()
    inflight.switch_interval_default(default)
    try:
        flight = inflight.Flight(lambda group: None)
        provider = HeldProvider()
        paced = [pending(i, not_before=time.time() + 60) for i in range(3)]
        flight.submit(provider, paced)
        assert sys.getswitchinterval() == inflight.PACED_SWITCH_INTERVAL
        flight.submit(provider, [pending(9)])  # unpaced work meanwhile changes nothing
        provider.answer(4)
        assert flight.drain(10) and sys.getswitchinterval() == default
    finally:
        sys.setswitchinterval(default)
        inflight.switch_interval_default(default)
        inflight._switch_default.clear()


def test_the_bound_is_the_share_of_the_account_a_send_worker_derives_at_start(settings):
    """Unset, SMSGW_SEND_CONCURRENCY is this process's share of the account's concurrent-request limit
    (smsgw.config.concurrency): 8 over a send worker of 2 processes puts at most 4 on the wire here."""
    from smsgw.config import concurrency
    from smsgw.runtime import roles

    settings.SEND_CONCURRENCY_PLAN = concurrency.SendConcurrency(None, 8, "the account", 4, "assumed")
    roles.send_concurrency_at_start(["send.bulk"], {"concurrency": 2, "pool_cls": "prefork"})
    flight = inflight.Flight(lambda group: None)
    provider = HeldProvider()
    task = threading.Thread(target=flight.submit, args=(provider, [pending(i) for i in range(9)]))
    task.start()
    until(lambda: provider.started == 4)
    assert len(provider.open) == 4, "the account's share, not more"
    provider.answer(4)
    until(lambda: provider.started == 8)
    assert len(provider.open) == 4
    provider.answer(4)
    until(lambda: provider.started == 9)
    task.join(10)
    provider.answer(1)
    assert flight.drain(10)
