"""The restore drill (docs/restore.md) with real processes: a worker, beat and the Twilio sandbox process
send messages due at staggered times; a backup is taken while they flow (PostgreSQL: `pg_dump -Fc`; the
SQLite half: SQLite's online backup API, as the embedded mode's runbook says); more go out after it; the
workers stop; the backup is restored into a fresh database; `manage.py restore_fence --since <backup time>`
runs against it; new workers start on it, sending through the same sandbox, which still holds what the lost
history sent. For every message: the sandbox holds exactly one copy, under the sid the restored database
records, and its final status is sent (or delivered). Nothing the sandbox held was submitted again;
everything due that it did not hold was sent once (delivery.sending.fence, delivery.sending.reconcile)."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from delivery.models import Attempt, AttemptOutcome
from delivery.sending import fence
from scheduling.models import Message, MessageEvent, Status
from tests import processes
from tests.factories import message, recipient, tenant_with_key
from tests.harness import Pipeline, handed_over

# Both halves: PostgreSQL (pg_dump, pg_restore) and the embedded mode's SQLite (its online backup API).
pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True), pytest.mark.sqlite]

N = 24
SPACING_S = 0.5  # due times t0 + FIRST_DUE_S + i * SPACING_S: they flow for about 12 s
FIRST_DUE_S = 2.0
# The sandbox never stores these (it answers 503): the lost history could not send them, so after the
# restore each must be proven absent and sent once. Early ones: `sending`, uncertain, at the backup.
BLOCKED = (1, 3)
# Due well after the drill's fence normally runs (about 15 s in): not fenced, sent once at their time by
# the new workers. (On a machine slow enough to fence later they are fenced, and proven absent instead.)
LATER = (N, N + 1)
LATER_DUE_S = 30.0
SENT_AT_BACKUP = 6  # take the backup once this many are recorded sent
MORE_AFTER_BACKUP = 6  # stop the workers once the sandbox holds this many more
SENT = (Status.SENT, Status.DELIVERED)


def _pg(tool: str, *args: str) -> list[str]:
    """A PostgreSQL client tool's command line, on the test database's server."""
    settings = connection.settings_dict
    server = ["-h", settings["HOST"] or "127.0.0.1", "-p", str(settings["PORT"] or 5432)]
    return [tool, *server, "-U", settings["USER"] or "postgres", *args]


class PostgresBackup:
    """`pg_dump -Fc` while the gateway runs (one consistent snapshot, taken as it starts), restored with
    createdb + pg_restore into a fresh database."""

    def __init__(self, original: str, folder: Path):
        self.original, self.dump, self.restored = original, folder / "backup.dump", f"{original}_restored"

    def take(self) -> None:
        subprocess.run(_pg("pg_dump", "-Fc", "-f", str(self.dump), self.original), check=True, timeout=60)

    def restore(self) -> str:
        subprocess.run(_pg("dropdb", "--if-exists", self.restored), check=True, timeout=60)
        subprocess.run(_pg("createdb", self.restored), check=True, timeout=60)
        subprocess.run(
            _pg("pg_restore", "--no-owner", "-d", self.restored, str(self.dump)), check=True, timeout=60
        )
        return self.restored

    def drop(self) -> None:
        subprocess.run(_pg("dropdb", "--if-exists", "--force", self.restored), timeout=60)


class SqliteBackup:
    """Embedded mode: SQLite's online backup API (a consistent copy while the others write), restored by
    putting the copy in place as a fresh file."""

    def __init__(self, original: str, folder: Path):
        self.original, self.copy, self.restored = (
            original,
            folder / "backup.sqlite3",
            folder / "restored.sqlite3",
        )

    def take(self) -> None:
        source, target = sqlite3.connect(self.original, timeout=30), sqlite3.connect(self.copy)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()

    def restore(self) -> str:
        shutil.copyfile(self.copy, self.restored)
        return str(self.restored)

    def drop(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.restored}{suffix}").unlink(missing_ok=True)


def _held(pipeline: Pipeline) -> dict[str, list[str]]:
    """Recipient -> the sids the sandbox holds for it."""
    held: dict[str, list[str]] = {}
    for m in pipeline.sandbox.messages_json():
        held.setdefault(m["to"], []).append(m["sid"])
    return held


def test_restore_drill_nothing_the_provider_holds_is_sent_again_and_the_rest_once(pipeline, tmp_path):
    started = time.monotonic()
    pipeline.sandbox.config(
        callbacks_enabled=False,
        rules=[{"to": recipient(i), "action": "503", "times": 1000} for i in BLOCKED],
    )
    tenant, _ = tenant_with_key("acme")
    original = connection.settings_dict["NAME"]
    backup = (PostgresBackup if connection.vendor == "postgresql" else SqliteBackup)(original, tmp_path)
    connection.close()
    pipeline.worker()
    pipeline.beat()
    # The due times count from the processes being ready: counted from before they start, a loaded machine
    # that starts them slowly has every message due at once, and all but the blocked ones are sent before
    # the backup (nothing left for the lost history to send, and the drill proves nothing).
    pipeline.ready()
    msgs = [
        message(tenant, to=recipient(i), body=f"drill {i}", due_in=FIRST_DUE_S + i * SPACING_S)
        for i in range(N)
    ] + [message(tenant, to=recipient(i), body=f"drill {i}", due_in=LATER_DUE_S) for i in LATER]
    pks = [m.pk for m in msgs]
    connection.close()

    # The backup, while messages flow: its time is taken before the backup starts, so it is no later than
    # the snapshot the backup holds (earlier is safe: more is looked up, nothing more is sent).
    pipeline.wait_until(
        lambda: Message.objects.filter(pk__in=pks, status__in=SENT).count() >= SENT_AT_BACKUP,
        60,
        "the first sends, recorded",
    )
    since = timezone.now()
    backup.take()
    # More go out after it: these only the provider will know of.
    more = min(len(_held(pipeline)) + MORE_AFTER_BACKUP, N - len(BLOCKED))
    pipeline.wait_until(lambda: len(_held(pipeline)) >= more, 60, "more sends after the backup")
    pipeline.stop()  # the old gateway is gone; what it sent since the backup is only at the provider
    held_by_lost_history = _held(pipeline)
    pipeline.sandbox.config(rules=[])  # the provider answers normally again

    after = None
    try:
        restored = backup.restore()
        connection.close()
        connection.settings_dict["NAME"] = restored  # from here on, the test reads the restored database
        at_restore = dict(Message.objects.filter(pk__in=pks).values_list("pk", "status"))
        after = Pipeline(pipeline.sandbox)
        fenced = subprocess.run(
            [sys.executable, "manage.py", "restore_fence", "--since", since.isoformat(), "--actor", "drill"],
            cwd=processes.ROOT,
            env=after.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert fenced.returncode == 0, fenced.stderr
        after.worker()
        after.beat()
        after.wait_all_final(pks, timeout=90)
        _assert_drill(pks, at_restore, held_by_lost_history, _held(pipeline), fenced.stdout)
    finally:
        if after is not None:
            after.stop()
        connection.close()
        connection.settings_dict["NAME"] = original
        backup.drop()
    took = time.monotonic() - started
    print(f"restore drill ({connection.vendor}): {took:.1f} s wall")


def _assert_drill(
    pks: list[int],
    at_restore: dict[int, str],
    held_by_lost_history: dict[str, list[str]],
    held: dict[str, list[str]],
    fence_output: str,
) -> None:
    msgs = {m.pk: m for m in Message.objects.filter(pk__in=pks)}
    # Every message: one copy at the provider, the one the restored database records; sent or delivered.
    twice = {to: sids for to, sids in held.items() if len(sids) != 1}
    assert not twice, f"copies held more than once: {twice}"
    assert len(held) == len(pks)
    for pk, msg in msgs.items():
        assert held[msg.to] == [msg.provider_message_id], (msg.to, msg.status, at_restore[pk])
    assert handed_over(pks) == Counter({Status.SENT: len(pks)})

    fenced = set(
        MessageEvent.objects.filter(message_id__in=pks, kind="fenced").values_list("message_id", flat=True)
    )
    attempts = list(Attempt.objects.filter(message_id__in=pks, response__has_key="fence"))
    outcomes = {a.message_id: a.outcome for a in attempts}
    assert set(outcomes) == fenced and len(attempts) == len(fenced)  # one fence attempt each
    fenced_at = {fence.fenced_at(a) for a in attempts}
    assert len(fenced_at) == 1, fenced_at
    fence_now = fenced_at.pop()
    assert fence_now is not None
    # The harness's request timeout, grace and list-lag bound (tests.harness.FAST): 2 + 3 + 2 s.
    bound = fence_now + timedelta(seconds=7)
    sent_before = {pk for pk, status in at_restore.items() if status in (Status.SENT, Status.DELIVERED)}
    found = {pk for pk in fenced if outcomes[pk] == AttemptOutcome.RECONCILED_FOUND}
    absent = {pk for pk in fenced if outcomes[pk] == AttemptOutcome.RECONCILED_ABSENT}
    later = {pk for pk in pks if pk not in fenced and pk not in sent_before}
    assert fenced.isdisjoint(sent_before) and found | absent == fenced, outcomes
    for pk in sent_before:  # recorded sent in the backup: never looked at, never sent again
        assert msgs[pk].to in held_by_lost_history
    for pk in found:  # sent by the lost history: recorded under its sid, not sent again
        assert msgs[pk].provider_message_id == held_by_lost_history[msgs[pk].to][0]
    for pk in absent:  # never reached the provider: proven absent only past the fence's bound, sent once
        assert msgs[pk].to not in held_by_lost_history
        entry = MessageEvent.objects.get(message_id=pk, kind="reconciled_absent")
        assert entry.details["rule"] == "restore_fence" and entry.created_at >= bound
    for pk in later:  # due after the fence: not fenced, sent once at its time
        assert msgs[pk].due_at > fence_now and msgs[pk].to not in held_by_lost_history
    blocked = {pk for pk, m in msgs.items() if m.to in {recipient(i) for i in BLOCKED}}
    assert blocked <= absent, "the messages the lost history could not send were proven absent, then sent"
    assert sent_before and found, (len(sent_before), len(found), len(absent), len(later))
    assert f"fenced {len(fenced)} (" in fence_output, fence_output
    print(
        f"restore drill: {len(sent_before)} sent before the backup, {len(found)} found at the provider, "
        f"{len(absent)} proven absent and sent once, {len(later)} due after the fence; {fence_output.strip()}"
    )
