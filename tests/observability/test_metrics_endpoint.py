"""GET /metrics: token-protected, and the state figures are read from the database at scrape time."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from delivery.models import ProviderCircuit, ProviderHostCircuit
from receipts.models import ReceiptEvent, WebhookDelivery
from reporting import state
from scheduling.dispatch import sweep
from scheduling.models import Message, Status
from smsgw.observability.models import Heartbeat
from tests.factories import message, recipient, tenant_with_key
from tests.metrics import TOKEN, scrape, value

# SQLite half too: the state metrics' queries have a SQLite form.
pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]


@pytest.fixture
def token(settings):
    settings.METRICS_TOKEN = TOKEN
    return TOKEN


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


def test_without_a_configured_token_the_endpoint_does_not_exist(client, settings):
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer anything").status_code == 404


def test_a_missing_or_wrong_token_is_refused(client, token):
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer " + token[:-1] + "x")
    assert wrong.status_code == 401 and wrong["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", HTTP_AUTHORIZATION="Basic " + token).status_code == 401
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer " + token)
    assert ok.status_code == 200 and ok["Content-Type"].startswith("text/plain")


def test_messages_by_status_and_priority_and_the_due_backlog(client, token, tenant):
    for i in range(3):
        message(tenant, to=recipient(i), priority="bulk", due_in=-120 - i)  # due for 2 minutes
    message(tenant, to=recipient(9), priority="transactional", due_in=3600)  # not due yet
    cancelled = message(tenant, to=recipient(10), priority="bulk", due_in=60)
    Message.objects.filter(pk=cancelled.pk).update(status=Status.CANCELLED, run_after=None)
    s = scrape(client)
    assert value(s, "smsgw_messages", status="scheduled", priority="bulk") == 3
    assert value(s, "smsgw_messages", status="scheduled", priority="transactional") == 1
    assert value(s, "smsgw_messages", status="queued", priority="bulk") == 0
    assert value(s, "smsgw_due_backlog", priority="bulk") == 3
    assert value(s, "smsgw_due_backlog", priority="transactional") == 0
    assert 122 <= value(s, "smsgw_due_oldest_age_seconds", priority="bulk") < 180
    assert value(s, "smsgw_due_oldest_age_seconds", priority="transactional") == 0
    if connection.vendor == "sqlite":  # PostgreSQL: a terminal status is the planner's estimate
        assert value(s, "smsgw_messages_finished_estimate", status="cancelled", priority="bulk") == 1


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_large_counts_are_the_planners_estimate_not_a_scan(tenant):
    """Above EXACT_BELOW the count is the planner's estimate: close to the truth after ANALYZE."""
    from tests.factories import messages_bulk

    messages_bulk(tenant, 3000, due_at=timezone.now() - timedelta(seconds=5), priority="bulk")
    with connection.cursor() as cur:
        cur.execute(f'ANALYZE "{state.MSG}"')
        where, params = '"status" = %s AND "priority" = %s', [Status.SCHEDULED, "bulk"]
        assert state.count(cur, where, params) == 3000, "exact while below the threshold"
        old = state.EXACT_BELOW
        state.EXACT_BELOW = 1000
        try:
            estimate = state.count(cur, where, params)
        finally:
            state.EXACT_BELOW = old
    assert 2400 <= estimate <= 3600, estimate


def test_receipts_webhooks_and_circuits_are_read_at_scrape_time(client, token, tenant):
    now = timezone.now()
    for i, (received, next_try) in enumerate([(90, 45), (10, 5), (0, -600)]):  # the last one is not due
        ReceiptEvent.objects.create(
            provider="twilio",
            provider_message_id=f"SM{i:032d}",
            raw_status="delivered",
            dedupe_key=f"k{i}",
            received_at=now - timedelta(seconds=received),
            next_try_at=now - timedelta(seconds=next_try),
        )
    for i, (status, age) in enumerate([("pending", 30), ("pending", -60), ("dead", 0), ("delivered", 0)]):
        WebhookDelivery.objects.create(
            webhook_id=f"wh{i}",
            tenant=tenant,
            event_type="message.sent",
            payload={},
            status=status,
            next_attempt_at=now - timedelta(seconds=age),
            created_at=now,
        )
    ProviderCircuit.objects.create(
        provider="twilio", account="AC1", state="open", window_started_at=now, updated_at=now
    )
    ProviderCircuit.objects.create(
        provider="twilio", account="AC2", state="closed", window_started_at=now, updated_at=now
    )
    ProviderHostCircuit.objects.create(
        provider="twilio", account="AC2", host="send-2", state="open", window_started_at=now, updated_at=now
    )
    s = scrape(client)
    assert value(s, "smsgw_receipts_due") == 2
    assert 45 <= value(s, "smsgw_receipts_lag_seconds") < 100
    assert value(s, "smsgw_webhook_outbox") == 2
    assert 30 <= value(s, "smsgw_webhook_outbox_oldest_age_seconds") < 90
    assert value(s, "smsgw_provider_circuit_open", provider="twilio", account="AC1") == 1
    assert value(s, "smsgw_provider_circuit_open", provider="twilio", account="AC2") == 0
    assert value(s, "smsgw_provider_host_circuit_open", provider="twilio", account="AC2", host="send-2") == 1


def test_a_sweep_pass_is_timed_counted_and_marks_sweep_liveness(client, token, tenant):
    s = scrape(client)
    assert value(s, "smsgw_sweep_age_seconds") == -1, "no sweep ever ran"
    passes = value(s, "smsgw_sweep_duration_seconds_count")
    queued_before = value(s, "smsgw_sweep_queued_total", priority="bulk")
    for i in range(4):
        message(tenant, to=recipient(i), priority="bulk", due_in=-1)
    sweep.sweep_for(0.2)
    s = scrape(client)
    assert value(s, "smsgw_sweep_duration_seconds_count") > passes
    assert value(s, "smsgw_sweep_queued_total", priority="bulk") - queued_before == 4
    assert 0 <= value(s, "smsgw_sweep_age_seconds") < 5
    at = Heartbeat.objects.get(name="sweep").at
    assert value(s, "smsgw_sweep_last_completed_timestamp_seconds") == pytest.approx(at.timestamp())
