"""The send worker's figures, from real provider answers (the sandbox through the Twilio adapter), read
back from the real /metrics endpoint: throughput by class, schedule lag, provider latency and outcome
codes, retries and dead letters. Counters are process-wide and cumulative: each test compares deltas."""

from __future__ import annotations

import pytest
from django.db import OperationalError

from delivery.sending import worker as sending
from scheduling.lifecycle import transitions
from scheduling.messages import service as services
from scheduling.models import Message, Status
from tests.factories import message, recipient, tenant_with_key
from tests.metrics import TOKEN, scrape, value

pytestmark = pytest.mark.django_db


@pytest.fixture
def tenant(db, settings):
    settings.METRICS_TOKEN = TOKEN
    return tenant_with_key("acme")[0]


def queued(tenant, to, **kw):
    msg = message(tenant, to=to, **kw)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    return msg


def test_sent_messages_count_by_class_with_their_schedule_lag(adapter, sandbox, tenant, client):
    before = scrape(client)
    late = [queued(tenant, recipient(i), priority="bulk", due_in=-90) for i in range(3)]  # due 90 s ago
    on_time = queued(tenant, recipient(7), priority="transactional", due_in=0)
    sending.send_batch([m.pk for m in [*late, on_time]])
    after = scrape(client)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("smsgw_messages_sent_total", priority="bulk") == 3
    assert delta("smsgw_messages_sent_total", priority="transactional") == 1
    assert delta("smsgw_schedule_lag_seconds_count", priority="bulk") == 3
    # All three bulk messages were sent about 90 s after their due time: none in the <= 60 s buckets.
    assert delta("smsgw_schedule_lag_seconds_bucket", priority="bulk", le="60.0") == 0
    assert delta("smsgw_schedule_lag_seconds_bucket", priority="bulk", le="120.0") == 3
    assert delta("smsgw_schedule_lag_seconds_bucket", priority="transactional", le="10.0") == 1
    assert delta("smsgw_provider_request_duration_seconds_count", provider="twilio") == 4
    assert delta("smsgw_provider_requests_total", provider="twilio", outcome="accepted", code="201") == 4


def test_retries_and_dead_letters_count_by_reason(adapter, sandbox, tenant, client):
    retried, rejected, throttled = recipient(21), recipient(22), recipient(23)
    sandbox.config(
        rules=[
            {"to": retried, "action": "400", "error_code": 30008, "times": 1},  # a 5xx is uncertain
            {"to": rejected, "action": "400", "error_code": 21211},
            {"to": throttled, "action": "429", "times": 1, "retry_after_seconds": 30},
        ]
    )
    msgs = [queued(tenant, to) for to in (retried, rejected, throttled)]
    before = scrape(client)
    sending.send_batch([m.pk for m in msgs])
    after = scrape(client)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("smsgw_send_retries_total", reason="retry_scheduled") == 1
    assert delta("smsgw_send_retries_total", reason="throttled") == 1
    assert delta("smsgw_dead_letters_total", reason="provider_rejected") == 1
    assert delta("smsgw_provider_requests_total", provider="twilio", outcome="rejected", code="21211") == 1
    assert delta("smsgw_messages_sent_total", priority="transactional") == 0


def test_a_duplicate_batch_that_loses_its_compare_and_set_counts_nothing(adapter, sandbox, tenant, client):
    msgs = [queued(tenant, recipient(i)) for i in range(2)]
    sending.send_batch([m.pk for m in msgs])
    before = scrape(client)
    sending.send_batch([m.pk for m in msgs])  # redelivered task: claims nothing, submits nothing
    after = scrape(client)
    assert value(after, "smsgw_messages_sent_total", priority="transactional") == value(
        before, "smsgw_messages_sent_total", priority="transactional"
    )


def test_segments_sent_count_by_provider(adapter, sandbox, tenant, client):
    long_one, short_one = queued(tenant, recipient(31)), queued(tenant, recipient(32))
    Message.objects.filter(pk=long_one.pk).update(segments=3)  # a long message: three parts, three prices
    before = scrape(client)
    sending.send_batch([long_one.pk, short_one.pk])
    after = scrape(client)
    got = value(after, "smsgw_segments_sent_total", provider="twilio")
    assert got - value(before, "smsgw_segments_sent_total", provider="twilio") == 4


def test_a_send_that_finds_its_message_cancelled_counts_a_cancellation_race(adapter, sandbox, tenant, client):
    cancelled, sent = queued(tenant, recipient(41)), queued(tenant, recipient(42))
    # The tenant cancels after the sweep queued it, before the send task claims it: the cancel wins.
    services.message_cancel(tenant=tenant, public_id=cancelled.public_id, actor="key:t")
    before = scrape(client)
    report = sending.send_batch([cancelled.pk, sent.pk])
    after = scrape(client)
    assert report.claimed == 1
    race = "smsgw_cancellation_races_total"
    assert (
        value(after, race, side="send_found_cancelled") - value(before, race, side="send_found_cancelled")
        == 1
    )
    assert Message.objects.get(pk=cancelled.pk).status == Status.CANCELLED


def test_a_send_claim_that_raises_counts_a_claim_failure(adapter, sandbox, tenant, client, monkeypatch):
    msg = queued(tenant, recipient(43))

    def refuse(*_args, **_kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(sending, "_claim_rows", refuse)
    before = scrape(client)
    with pytest.raises(OperationalError):
        sending.send_batch([msg.pk])
    after = scrape(client)
    labels = {"stage": "send", "error": "OperationalError"}
    assert (
        value(after, "smsgw_claim_failures_total", **labels)
        - value(before, "smsgw_claim_failures_total", **labels)
        == 1
    )
    assert Message.objects.get(pk=msg.pk).status == Status.QUEUED  # the claim rolled back whole
