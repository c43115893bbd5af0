"""What receipts say, as figures: delivered and undelivered counts and the due-to-delivered latency by
provider, and every provider callback counted by kind, provider and outcome. Real signed callbacks through
the real endpoint and processor, read back from the real /metrics endpoint (deltas: counters are
process-wide)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from scheduling.models import Message
from tests.metrics import TOKEN, scrape, value
from tests.receipts.test_receipts import callback, cfg, drain, sent_message, signed_post, tenant  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _token(settings):
    settings.METRICS_TOKEN = TOKEN


def test_delivered_and_undelivered_count_by_provider_with_the_due_to_delivered_latency(cfg, tenant):  # noqa: F811
    delivered = [sent_message(tenant, f"SM{i:032x}") for i in range(3)]
    undelivered = sent_message(tenant, "SM" + "9" * 32)
    # Due 90 s ago: the latency runs from the due time to the receipt (no carrier time here: its arrival).
    Message.objects.filter(pk__in=[m.pk for m in delivered]).update(
        due_at=timezone.now() - timedelta(seconds=90)
    )
    before = scrape()
    for msg in delivered:
        assert signed_post(callback(msg.provider_message_id, "delivered")).status_code == 201
    signed_post(callback(undelivered.provider_message_id, "undelivered", ErrorCode="30005"))
    signed_post(callback(delivered[0].provider_message_id, "delivered"))  # a duplicate moves nothing
    drain()
    after = scrape()

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("smsgw_messages_delivered_total", provider="twilio") == 3
    assert delta("smsgw_messages_undelivered_total", provider="twilio") == 1
    latency = "smsgw_due_to_delivered_seconds"
    assert delta(f"{latency}_count", provider="twilio") == 3
    assert delta(f"{latency}_bucket", provider="twilio", le="60.0") == 0
    assert delta(f"{latency}_bucket", provider="twilio", le="120.0") == 3


def test_every_callback_is_counted_by_kind_provider_and_outcome(cfg, tenant):  # noqa: F811
    msg = sent_message(tenant, "SM" + "a" * 32)
    name = "smsgw_callbacks_received_total"
    before = scrape()
    assert signed_post(callback(msg.provider_message_id, "sent")).status_code == 201
    assert signed_post(callback(msg.provider_message_id, "sent")).status_code == 200  # the same again
    assert Client().post("/receipts/twilio/", callback("SMx", "sent")).status_code == 403  # unsigned
    assert Client().post("/receipts/nosuch/", callback("SMx", "sent")).status_code == 404
    assert Client().post("/inbound/twilio/", {"From": "+14155550100"}).status_code == 403
    after = scrape()

    def delta(**labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta(kind="receipt", provider="twilio", outcome="stored") == 1
    assert delta(kind="receipt", provider="twilio", outcome="duplicate") == 1
    assert delta(kind="receipt", provider="twilio", outcome="refused") == 1
    assert delta(kind="receipt", provider="unknown", outcome="invalid") == 1  # the URL's word is not a label
    assert delta(kind="inbound", provider="twilio", outcome="refused") == 1
