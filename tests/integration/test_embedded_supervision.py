"""The README's first command kept alive: ``./deploy/run-embedded.sh`` (SQLite, the filesystem broker, the
sandbox, gunicorn, a celery worker and beat under deploy/embedded.py's supervisor), driven over HTTP as a
user drives it, with the faults that used to stop it.

Every test states each message's expected end: delivered, with exactly one submission stored for its
recipient (each message has a recipient of its own) by the two sandboxes together: the demo routes send a
US number through Twilio with Vonage as standby, and a message Twilio was proved never to have got (one a
killed worker never sent) moves on to Vonage."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from bench.harness.embedded import EmbeddedRun, Sender, hogs_start, hogs_stop, outcome
from smsgw.runtime.queues import ROUTED_QUEUES
from tests.waiting import wait_for

# The embedded mode runs in its own processes on SQLite and the filesystem broker: the SQLite half's.
pytestmark = [pytest.mark.integration, pytest.mark.embedded]

# Recovery windows short enough for a test (production's are minutes to an hour): a task a killed worker
# held is published again after 5 s, a submission whose answer it never read is looked up after a few
# seconds, and a message left at `sent` because its delivery receipt found the web down (the sandbox,
# like Twilio by default, does not retry a refused status callback) is looked up after 10 s.
FAST = {
    "SMSGW_STATUS_LOOKUP_AFTER_SECONDS": "10",
    "SMSGW_STATUS_LOOKUP_INTERVAL": "2",
    "SMSGW_QUEUED_RECOVERY_SECONDS": "5",
    "SMSGW_SENDING_LEASE_SECONDS": "5",
    "TWILIO_TIMEOUT_SECONDS": "3",
    "VONAGE_TIMEOUT_SECONDS": "3",
    "SMSGW_RECONCILE_FIRST_LOOK_SECONDS": "1",
    "SMSGW_RECONCILE_ABSENT_GRACE_SECONDS": "3",
    "SMSGW_RECONCILE_LIST_LAG_SECONDS": "2",
}


@pytest.fixture
def embedded():
    runs: list[EmbeddedRun] = []

    def start(env: dict | None = None) -> EmbeddedRun:
        run = EmbeddedRun(env=env)
        runs.append(run)
        run.start()
        return run

    yield start
    for run in runs:
        run.stop()


def _assert_each_delivered_once(run: EmbeddedRun, result: dict) -> None:
    assert result["statuses"] == {"delivered": result["accepted"]}, (result, run.log()[-6000:])
    assert result["duplicated"] == 0, result
    assert result["never_submitted"] == 0, result


def _alive(pid: int | None) -> bool:
    try:
        return pid is not None and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _under_cpu_load(embedded, seconds: int) -> None:
    hogs = hogs_start(os.cpu_count() or 2)
    try:
        run = embedded()
        pids = {name: c["pid"] for name, c in run.status()["children"].items()}
        sender = Sender(run, rate=2, seconds=seconds, senders=4)
        sender.start()
        sender.join(seconds + 250)
        assert not sender.is_alive() and sender.error is None, sender.error
    finally:
        hogs_stop(hogs)
    result = outcome(run, sender.accepted, settle_seconds=180)
    assert result["accepted"] == 2 * seconds
    _assert_each_delivered_once(run, result)
    assert run.restarts() == {"twilio-sandbox": 0, "vonage-sandbox": 0, "web": 0, "worker": 0, "beat": 0}, (
        run.log()[-6000:]
    )
    assert all(_alive(pid) for pid in pids.values()), pids
    assert "Unrecoverable error" not in run.log()


HOGS = "keeps every core busy on purpose: a neighbour's timing would be its doing"


@pytest.mark.serial(reason=HOGS)
def test_embedded_run_under_cpu_load_on_every_core_delivers_every_message_once_and_no_process_exits(
    embedded,
):
    """kombu#1551 stopped the worker (and with it the whole run) within minutes on a loaded machine: a
    message file opened while still empty. Here every core is kept busy by other processes and a message
    is sent every half second for 20 s (40 messages, each read from a file the worker found while the
    cores were busy); the long tier runs the same for 2.5 minutes. Final state: every message delivered,
    each submitted once, no child restarted or exited."""
    _under_cpu_load(embedded, seconds=20)


@pytest.mark.long
@pytest.mark.timeout(900)
@pytest.mark.serial(reason=HOGS)
def test_long_embedded_run_under_cpu_load_for_two_and_a_half_minutes(embedded):
    """The production-scale version of the test above: 300 messages over 150 s under the hogs."""
    _under_cpu_load(embedded, seconds=150)


def test_bad_files_in_the_embedded_broker_folder_are_set_aside_and_the_worker_sends_the_next_message(
    embedded,
):
    run = embedded()
    worker = run.status()["children"]["worker"]["pid"]
    argv = psutil.Process(worker).cmdline()
    assert argv[argv.index("-Q") + 1].split(",") == list(ROUTED_QUEUES)  # every queue has its consumer
    out = run.var / "broker" / "out"
    # Named to sort first in their queues' folder listing, so the worker meets them before the message.
    bad = {
        "0_empty.send.transactional.msg": b"",
        "0_truncated.send.transactional.msg": b'{"body": "eyJpZHMiOiBbMSwgMl19", "content-type": "applic',
        "0_invalid.sweep.msg": b"this is not json",
    }
    for name, content in bad.items():
        (out / name).write_bytes(content)
    first = run.post_message(
        {"to": "+14155550111", "body": "after bad files"}, "bad-files-1", time.monotonic() + 60
    )

    def set_aside() -> bool:
        return sorted(p.name for p in (run.var / "broker" / "bad").iterdir()) == sorted(bad)

    wait_for(set_aside, 120, "the bad files to be set aside")
    result = outcome(run, [{"id": first["id"], "to": "+14155550111"}], settle_seconds=120)
    _assert_each_delivered_once(run, result)
    assert run.status()["children"]["worker"]["pid"] == worker and _alive(worker)
    assert run.restarts()["worker"] == 0
    log = run.log()
    assert log.count("broker: discarded a filesystem message") >= 1
    assert "Unrecoverable error" not in log


CHILDREN = ("twilio-sandbox", "vonage-sandbox", "web", "worker", "beat")


def test_each_embedded_child_killed_with_sigkill_is_restarted_and_every_message_is_delivered_once(embedded):
    """One run, four kills: the worker, the Twilio sandbox, beat and gunicorn are each killed with SIGKILL
    (their whole process group, pool children included) while messages keep arriving. Each kill is its own
    fault, as in a run of its own: it comes once 20 more messages were accepted and every message accepted
    before it was delivered, and the next comes once the killed child is back and the same holds again.
    Each is restarted once by the supervisor, and nothing else is. Final state: all messages accepted
    before, between and after the kills delivered, each submitted once (by Twilio, or by Vonage for one
    Twilio was proved never to have got); then Ctrl-C (SIGTERM to the group) stops every process within
    30 s."""
    run = embedded(FAST)
    sender = Sender(run, rate=4, seconds=600, senders=8)
    sender.start()
    for child in ("worker", "twilio-sandbox", "beat", "web"):
        seen = len(sender.accepted)
        wait_for(
            lambda n=seen: len(sender.accepted) >= n + 20, 120, f"20 messages accepted before {child}'s kill"
        )
        # the previous kill's messages settled: each fault starts from a run with nothing left to recover
        _assert_each_delivered_once(run, outcome(run, list(sender.accepted), settle_seconds=240))
        before = run.status()["children"][child]["pid"]
        os.killpg(before, signal.SIGKILL)

        def restarted(child=child, before=before) -> int | None:
            c = run.status()["children"][child]
            return c["pid"] if c["restarts"] == 1 and c["pid"] != before and _alive(c["pid"]) else None

        wait_for(restarted, 120, f"{child} to be started again")
        assert f"{child} exited (signal 9)" in run.log()
    seen = len(sender.accepted)
    wait_for(lambda: len(sender.accepted) >= seen + 20, 120, "20 messages accepted after the last kill")
    sender.stop()
    sender.join(150)
    assert not sender.is_alive() and sender.error is None, sender.error
    result = outcome(run, sender.accepted, settle_seconds=240)
    assert result["accepted"] >= 100
    _assert_each_delivered_once(run, result)
    # each killed child was restarted once, and nothing else
    assert run.restarts() == {n: (0 if n == "vonage-sandbox" else 1) for n in CHILDREN}
    assert all(_alive(c["pid"]) for c in run.status()["children"].values())
    tree = [psutil.Process(run.proc.pid), *psutil.Process(run.proc.pid).children(recursive=True)]
    # Ctrl-C (SIGTERM to the group) still stops every process, pool children included, within 30 s.
    assert run.stop(timeout=30) < 30
    _, alive = psutil.wait_procs(tree, timeout=5)
    assert not alive, [(p.pid, p.cmdline()) for p in alive]
