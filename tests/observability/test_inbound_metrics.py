"""Inbound on /metrics: the counters (received and duplicates by provider, keyword actions, the
provider-to-tenant delay) move when it happens, and the state gauges (backlog and its age, parts waiting,
unrouted in the last hour, near misses for review) are read from the database at scrape time."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from delivery.providers.types import InboundMessage as Parsed
from inbound.intake import inbound_store
from inbound.models import InboundMessage, InboundPart, InboundState
from receipts.models import WebhookDelivery
from receipts.webhooks import INBOUND_EVENT, _inbound_delay
from tests.factories import tenant_with_key
from tests.inbound_rows import inbound_receive, inbound_row
from tests.metrics import TOKEN, scrape, value

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]


@pytest.fixture
def token(settings):
    settings.METRICS_TOKEN = TOKEN
    return TOKEN


def test_received_counts_new_and_duplicate_by_provider(client, token):
    before = scrape(client)
    parsed = Parsed(body="hi", from_number="+14155550123", to_number="+14155550100", message_id="SMdup1")
    for _ in range(3):  # the provider retried twice
        inbound_store(provider="twilio", inbound=parsed, received_at=timezone.now())
    after = scrape(client)

    def grew(result):
        name = "smsgw_inbound_received_total"
        return value(after, name, provider="twilio", result=result) - value(
            before, name, provider="twilio", result=result
        )

    assert (grew("stored"), grew("duplicate")) == (1, 2)
    assert InboundMessage.objects.filter(provider_message_id="SMdup1").count() == 1


def test_keyword_actions_and_near_misses_are_counted(client, token):
    tenant_with_key("acme")  # owns the receiving number (tests.factories.SENDER)
    before = scrape(client)
    stop = inbound_receive("STOP")
    near = inbound_receive("stop please", message_id="SMnear")
    after = scrape(client)
    assert (stop.action, near.needs_review) == ("opt_out", True)
    name = "smsgw_inbound_keyword_actions_total"
    for action in ("opt_out", "review"):
        assert value(after, name, action=action) - value(before, name, action=action) == 1, action


def test_provider_to_tenant_delay_is_observed_on_the_first_delivery_only(client, token):
    tenant, _ = tenant_with_key("acme")
    now = timezone.now()
    delivery = WebhookDelivery(
        webhook_id="whin_1",
        tenant=tenant,
        event_type=INBOUND_EVENT,
        payload={"data": {"received_at": (now - timedelta(seconds=1.5)).isoformat()}},
        attempts=1,
        next_attempt_at=now,
        created_at=now,
    )
    before = scrape(client)
    _inbound_delay(delivery, now)
    delivery.attempts = 2  # a retry or a replay: not the pipeline's delay
    _inbound_delay(delivery, now + timedelta(seconds=60))
    after = scrape(client)
    name = "smsgw_inbound_to_tenant_seconds"
    assert value(after, f"{name}_count") - value(before, f"{name}_count") == 1
    assert value(after, f"{name}_sum") - value(before, f"{name}_sum") == pytest.approx(1.5, abs=0.01)
    assert value(after, f"{name}_bucket", le="2.0") - value(before, f"{name}_bucket", le="2.0") == 1


def test_backlog_and_its_age(client, token):
    s = scrape(client)
    assert value(s, "smsgw_inbound_pending") == 0
    assert value(s, "smsgw_inbound_pending_oldest_age_seconds") == 0
    old = inbound_row(None, state=InboundState.PENDING)
    InboundMessage.objects.filter(pk=old.pk).update(next_try_at=timezone.now() - timedelta(seconds=90))
    inbound_row(None, state=InboundState.PENDING)
    later = inbound_row(None, state=InboundState.PENDING)  # put back: not due, not lag
    InboundMessage.objects.filter(pk=later.pk).update(next_try_at=timezone.now() + timedelta(minutes=5))
    inbound_row(None, state=InboundState.ROUTED, days_ago=1)
    s = scrape(client)
    assert value(s, "smsgw_inbound_pending") == 3
    assert 89 <= value(s, "smsgw_inbound_pending_oldest_age_seconds") < 120


def test_parts_waiting_unrouted_and_review(client, token):
    tenant, _ = tenant_with_key("acme")
    now = timezone.now()
    InboundPart.objects.create(
        provider="vonage",
        provider_message_id="p1",
        from_number="447700900001",
        to_number="447700900000",
        concat_ref="0A",
        total=2,
        part=2,
        received_at=now - timedelta(seconds=40),
    )
    inbound_row(None, state=InboundState.UNROUTED)
    inbound_row(None, state=InboundState.UNROUTED, days_ago=0.5)  # more than an hour ago
    inbound_row(tenant, needs_review=True)
    inbound_row(tenant, needs_review=True, days_ago=2)  # past the 24 hours
    inbound_row(tenant)
    s = scrape(client)
    assert 39 <= value(s, "smsgw_inbound_parts_waiting_oldest_seconds") < 70
    assert value(s, "smsgw_inbound_unrouted_recent") == 1
    assert value(s, "smsgw_inbound_needs_review_recent") == 1
