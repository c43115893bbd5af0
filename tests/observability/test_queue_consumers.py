"""Queues with work waiting and no consumer: the broker's real depth (a passive declare) combined with the
workers' consumer heartbeats, as /readyz and /metrics report it. The worker side (the bootstep writing the
heartbeats) runs in real worker processes in tests/integration/test_queue_consumers.py."""

from __future__ import annotations

import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from celery.worker import state as worker_state
from django.utils import timezone

from config.celery import app
from smsgw.observability.consumers import pool_usage
from smsgw.observability.models import QueueConsumer, UnconsumedQueue
from smsgw.observability.queues import (
    queue_consumers_prune,
    queue_consumers_record,
    queue_consumers_stop,
    queue_states_observe,
)
from smsgw.runtime import broker
from smsgw.runtime.queues import CAMPAIGNS, ROUTED_QUEUES
from tests.metrics import TOKEN, scrape, value

pytestmark = pytest.mark.django_db


def _publish_to_campaigns() -> None:
    # A creation job for a campaign that does not exist: nothing consumes it here, its content is moot.
    app.send_task("scheduling.campaign_make", args=[0], queue=CAMPAIGNS)


def _state(name: str = CAMPAIGNS, **kw):
    return next(s for s in queue_states_observe(**kw) if s.name == name)


def _campaigns(client, query: str = "") -> tuple[int, dict]:
    response = client.get("/readyz" + query)
    body = response.json()["queues"]
    return response.status_code, {"listed": CAMPAIGNS in body["unconsumed"], **body["by_queue"][CAMPAIGNS]}


def test_waiting_work_with_no_consumer_is_listed_once_it_has_waited_past_the_threshold(client, settings):
    settings.QUEUE_UNCONSUMED_SECONDS = 60
    settings.METRICS_TOKEN = TOKEN
    _publish_to_campaigns()

    status, first = _campaigns(client)
    assert status == 200 and first["ready"] == 1 and first["consumers"] == 0
    assert 0 <= first["unconsumed_seconds"] < 30 and not first["listed"], first
    assert UnconsumedQueue.objects.filter(queue=CAMPAIGNS).exists(), "the first look records the instant"

    # "Longer than a minute" without waiting one: the instant the first look recorded, moved back.
    UnconsumedQueue.objects.filter(queue=CAMPAIGNS).update(since=timezone.now() - timedelta(seconds=61))
    status, later = _campaigns(client)
    assert status == 200, "a queue without a consumer does not unready the web by default"
    assert later["listed"] and later["unconsumed_seconds"] >= 61 and later["ready"] == 1, later
    assert _campaigns(client, "?queues=1")[0] == 503
    samples = scrape(client)
    assert value(samples, "smsgw_queue_unconsumed_seconds", queue=CAMPAIGNS) >= 61
    assert value(samples, "smsgw_queue_ready_messages", queue=CAMPAIGNS) == 1
    assert value(samples, "smsgw_queue_consumers", queue=CAMPAIGNS) == 0
    assert {q for q in ROUTED_QUEUES if ("smsgw_queue_consumers", (("queue", q),)) in samples} == set(
        ROUTED_QUEUES
    ), "every routed queue is reported"

    queue_consumers_record(hostname="campaigns@host1", queues=[CAMPAIGNS])
    status, consumed = _campaigns(client, "?queues=1")
    assert status == 200 and consumed["consumers"] == 1 and consumed["unconsumed_seconds"] == 0
    assert not consumed["listed"] and not UnconsumedQueue.objects.filter(queue=CAMPAIGNS).exists()

    # Its goodbye: gone at once, and the count starts again from then, not from the old instant.
    queue_consumers_stop(hostname="campaigns@host1")
    status, gone = _campaigns(client, "?queues=1")
    assert status == 200 and gone["consumers"] == 0 and 0 <= gone["unconsumed_seconds"] < 30, gone


def test_an_empty_queue_without_a_consumer_is_not_unconsumed(client):
    states = queue_states_observe()
    assert [s.name for s in states] == list(ROUTED_QUEUES)
    assert all(s.ready == 0 and s.consumers == 0 and s.unconsumed_seconds == 0 for s in states), states
    assert not UnconsumedQueue.objects.exists()
    assert client.get("/readyz?queues=1").status_code == 200


def test_a_consumer_that_stops_heartbeating_is_gone_after_the_stale_time(settings):
    settings.QUEUE_CONSUMER_STALE_SECONDS = 30
    _publish_to_campaigns()
    now = timezone.now()
    queue_consumers_record(hostname="campaigns@host1", queues=[CAMPAIGNS], now=now - timedelta(seconds=29))
    assert _state(now=now).consumers == 1 and _state(now=now).unconsumed_seconds == 0
    killed = _state(now=now + timedelta(seconds=2))  # 31 s without a heartbeat: killed, no goodbye
    assert killed.consumers == 0 and killed.ready == 1


def test_a_consumer_seen_after_the_first_look_restarts_the_count(settings):
    settings.QUEUE_CONSUMER_STALE_SECONDS = 30
    _publish_to_campaigns()
    now = timezone.now()
    UnconsumedQueue.objects.create(queue=CAMPAIGNS, since=now - timedelta(seconds=600))
    # A worker came after that look and died 100 s ago, between two looks: unconsumed since then.
    queue_consumers_record(hostname="campaigns@host1", queues=[CAMPAIGNS], now=now - timedelta(seconds=100))
    state = _state(now=now)
    assert state.consumers == 0 and state.unconsumed_seconds == pytest.approx(100, abs=0.01)


def test_a_worker_that_no_longer_consumes_a_queue_is_marked_stopped_there():
    queue_consumers_record(hostname="w@host1", queues=["sweep", "reconcile"])
    queue_consumers_record(hostname="w@host1", queues=["sweep"])  # celery control cancel_consumer
    rows = dict(QueueConsumer.objects.values_list("queue", "stopped"))
    assert rows == {"sweep": False, "reconcile": True}
    assert [s.consumers for s in queue_states_observe(names=["sweep", "reconcile"])] == [1, 0]
    queue_consumers_record(hostname="w@host1", queues=["sweep", "reconcile"])  # add_consumer
    assert not QueueConsumer.objects.filter(stopped=True).exists()
    assert QueueConsumer.objects.count() == 2, "one row per node and queue, refreshed in place"


def test_rows_of_nodes_not_seen_for_a_day_are_pruned():
    now = timezone.now()
    queue_consumers_record(hostname="old@host1", queues=["sweep"], now=now - timedelta(days=1, seconds=1))
    queue_consumers_record(hostname="new@host2", queues=["sweep"], now=now)
    assert queue_consumers_prune(now=now) == 1
    assert list(QueueConsumer.objects.values_list("hostname", flat=True)) == ["new@host2"]


def test_a_broker_that_does_not_answer_leaves_the_depths_unknown_and_records_nothing(client, settings):
    settings.METRICS_TOKEN = TOKEN
    queue_consumers_record(hostname="campaigns@host1", queues=[CAMPAIGNS])
    old = app.conf.broker_write_url
    app.conf.broker_write_url = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    try:
        states = queue_states_observe()
        samples = scrape(client)
        body = client.get("/readyz").json()
    finally:
        app.conf.broker_write_url = old
    assert all(s.ready is None and s.unconsumed_seconds is None for s in states), states
    assert not UnconsumedQueue.objects.exists()
    assert ("smsgw_queue_ready_messages", (("queue", CAMPAIGNS),)) not in samples
    assert ("smsgw_queue_unconsumed_seconds", (("queue", CAMPAIGNS),)) not in samples
    assert value(samples, "smsgw_queue_consumers", queue=CAMPAIGNS) == 1, "consumers come from the database"
    assert body["queues"] == {"error": "broker", "unconsumed": []}


@pytest.mark.sqlite  # the embedded filesystem broker too: its queue's head is the first file
def test_the_oldest_task_of_a_queue_is_aged_from_its_publish_time(client, settings):
    settings.METRICS_TOKEN = TOKEN
    assert value(scrape(client), "smsgw_queue_oldest_age_seconds", queue=CAMPAIGNS) == 0, "empty"
    _publish_to_campaigns()
    between = time.time()
    _publish_to_campaigns()  # a newer one behind it
    # Read 100 s after the instant between the two: the head (the first) has waited longer than that.
    age = broker.queue_oldest_ages([CAMPAIGNS, "sweep"], now=between + 100)
    assert 100 < age[CAMPAIGNS] < 160 and age["sweep"] == 0, age
    scraped = value(scrape(client), "smsgw_queue_oldest_age_seconds", queue=CAMPAIGNS)
    assert 0 < scraped < 60


def test_a_broker_that_cannot_show_its_queue_head_reports_no_age(monkeypatch):
    _publish_to_campaigns()
    old = app.conf.broker_write_url
    app.conf.broker_write_url = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    try:
        assert broker.queue_oldest_ages([CAMPAIGNS]) == {CAMPAIGNS: None}
    finally:
        app.conf.broker_write_url = old


def test_worker_utilisation_sums_the_pools_of_the_live_consumers(client, settings):
    settings.METRICS_TOKEN = TOKEN
    now = timezone.now()
    queue_consumers_record(hostname="a@h1", queues=["send.bulk", "send.transactional"], processes=4, busy=3)
    queue_consumers_record(hostname="b@h2", queues=["send.bulk"], processes=8, busy=2)
    queue_consumers_record(  # died an hour ago: not counted
        hostname="dead@h3", queues=["send.bulk"], processes=8, busy=8, now=now - timedelta(hours=1)
    )
    samples = scrape(client)
    assert value(samples, "smsgw_worker_processes", queue="send.bulk") == 12
    assert value(samples, "smsgw_worker_busy_processes", queue="send.bulk") == 5
    assert value(samples, "smsgw_worker_processes", queue="send.transactional") == 4
    assert value(samples, "smsgw_worker_busy_processes", queue="send.transactional") == 3
    assert value(samples, "smsgw_worker_processes", queue="campaigns") == 0


def test_a_workers_pool_usage_is_its_processes_and_the_tasks_they_run(monkeypatch):
    prefork = SimpleNamespace(pool=SimpleNamespace(num_processes=4), concurrency=4)
    monkeypatch.setattr(worker_state, "active_requests", {object(), object()})
    assert pool_usage(prefork) == (4, 2)
    threads = SimpleNamespace(pool=SimpleNamespace(limit=8), concurrency=8)
    assert pool_usage(threads) == (8, 2)
    not_started = SimpleNamespace(pool=None, concurrency=2)
    monkeypatch.setattr(worker_state, "active_requests", {object(), object(), object()})
    assert pool_usage(not_started) == (2, 2), "never more busy than processes"
