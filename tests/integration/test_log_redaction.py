"""A real worker's log after a real database failure holds no body, number or metadata value
(docs/api.md, log redaction). PostgreSQL is made to refuse the sweep's release (a CHECK constraint added for the test),
so the `scheduling.sweep` task fails on an UPDATE whose error carries ``DETAIL: Failing row contains
(…)``: the whole row, with the recipient, the sender, the body and the metadata."""

from __future__ import annotations

import secrets

import pytest
from django.db import connection

from scheduling.models import Message
from tests.factories import SENDER, message, tenant_with_key

pytestmark = pytest.mark.integration

NUMBER = "+14155550143"
CONSTRAINT = "test_refuse_release"


@pytest.fixture
def release_refused(transactional_db):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL: its error DETAIL is what carries the row")
    table = Message._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f"ALTER TABLE {table} ADD CONSTRAINT {CONSTRAINT} CHECK (status <> 'queued') NOT VALID")
    connection.close()
    try:
        yield
    finally:
        with connection.cursor() as cur:
            cur.execute(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {CONSTRAINT}")


def test_a_worker_whose_task_fails_on_the_database_logs_no_body_number_or_metadata(release_refused, pipeline):
    body = f"Pickup code {secrets.token_hex(4)}"
    meta = f"order-{secrets.token_hex(5)}"
    tenant, _ = tenant_with_key("acme")
    msg = message(tenant, to=NUMBER, body=body)
    Message.objects.filter(pk=msg.pk).update(metadata={"ref": meta})
    connection.close()

    worker = pipeline.worker("redact", queues="sweep", concurrency=1)
    beat = pipeline.beat()
    pipeline.wait_until(lambda: CONSTRAINT in worker.log(), 90, "the sweep to fail on the constraint")
    log = worker.log() + beat.log()

    assert "Failing row contains" not in log and "DETAIL:" not in log
    for what, value in {
        "body": body,
        "metadata value": meta,
        "number": NUMBER,
        "number digits": NUMBER[1:],
        "sender": SENDER,
    }.items():
        assert value not in log, f"{what} in the worker's log:\n" + "\n".join(
            line for line in log.splitlines() if value in line
        )
