"""The retention job killed (SIGKILL) in the middle of a batch, then run again: every message is in
exactly one place (live or history) after the kill, none lost, none in both; the second run moves the
rest. A real ``manage.py retention_run`` process against real PostgreSQL, killed while its move
transaction is writing."""

from __future__ import annotations

import signal
import subprocess
import sys
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from retention.models import MessageHistory
from scheduling.models import Message, MessageEvent, Status
from tests.factories import messages_bulk, tenant_with_key
from tests.processes import ROOT, process_env
from tests.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]

N = 4000


def _finished_long_ago(tenant) -> list[int]:
    ids = messages_bulk(tenant, N, due_at=timezone.now() - timedelta(days=3))
    old = timezone.now() - timedelta(days=3)
    Message.objects.filter(id__in=ids).update(
        status=Status.DELIVERED, delivered_at=old, updated_at=old, run_after=None
    )
    MessageEvent.objects.bulk_create(
        [MessageEvent(message_id=i, kind="to_delivered", to_status="delivered", created_at=old) for i in ids]
    )
    return ids


def _moving_backend() -> int | None:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND state = 'active' AND (query ILIKE 'INSERT INTO \"retention_messagehistory\"%%' "
            "OR query ILIKE 'DELETE FROM \"scheduling_message%%')"
        )
        row = cur.fetchone()
    return row[0] if row else None


def _backend_gone(pid: int) -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid])
        return cur.fetchone() is None


def test_a_move_killed_mid_batch_leaves_every_message_in_exactly_one_place():
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL: the kill lands inside a real server-side transaction")
    tenant, _ = tenant_with_key()
    ids = _finished_long_ago(tenant)
    env = process_env(SMSGW_RETENTION_BATCH_SIZE=str(N))
    run = [sys.executable, "manage.py", "retention_run"]
    proc = subprocess.Popen(run, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        pid = wait_for(_moving_backend, 60, "the move to start", interval=0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    # The server aborts the dead client's transaction once it sees the socket closed.
    wait_for(lambda: _backend_gone(pid), 60, "the killed job's session to end")

    live = set(Message.objects.filter(id__in=ids).values_list("id", flat=True))
    moved = set(MessageHistory.objects.filter(id__in=ids).values_list("id", flat=True))
    assert live | moved == set(ids), "a message was lost"
    assert not live & moved, "a message is in both places"
    assert moved == set(), "the killed batch committed: the kill landed too late to test anything"

    again = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True)
    assert '"messages_moved": 4000' in again.stdout, again.stdout
    assert not Message.objects.filter(id__in=ids).exists()
    assert MessageHistory.objects.filter(id__in=ids).count() == N
    assert not MessageEvent.objects.filter(message_id__in=ids).exists()
