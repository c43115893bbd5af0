"""A routed queue with work waiting and no worker, on the real broker with real worker processes: a
campaign posted while no ``campaigns`` worker runs stays ``creating``, and /readyz and /metrics name the
queue; a real ``celery worker -Q campaigns`` records itself as its consumer, makes the campaign, and the
report clears (with the job's age in the queue, and the worker's pool); its warm shutdown removes it at
once, a kill -9 once its heartbeats go stale."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.models import Campaign
from smsgw.observability.models import QueueConsumer, UnconsumedQueue
from smsgw.observability.queues import queue_states_observe
from smsgw.runtime.queues import CAMPAIGNS
from tests.factories import recipient, tenant_with_key
from tests.metrics import TOKEN, scrape, value
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _post_campaign(key: str) -> str:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    send_at = (timezone.now() + timedelta(days=1)).replace(microsecond=0).isoformat()
    people = [{"phone": recipient(i)} for i in range(3)]
    resp = api.post("/v1/campaigns", {"body": "Hi", "send_at": send_at, "recipients": people}, format="json")
    assert resp.status_code == 202, resp.content
    return resp.json()["id"]


def _status(public_id: str) -> str:
    return Campaign.objects.values_list("status", flat=True).get(public_id=public_id)


def _campaigns(client: Client, query: str = "") -> dict:
    response = client.get("/readyz" + query)
    body = response.json()["queues"]
    return {
        "http": response.status_code,
        "listed": CAMPAIGNS in body["unconsumed"],
        **body["by_queue"][CAMPAIGNS],
    }


def test_a_campaign_queue_without_a_worker_is_reported_until_a_real_worker_consumes_it(pipeline, settings):
    settings.METRICS_TOKEN = TOKEN
    client = Client()
    _, key = tenant_with_key("queues")
    cid = _post_campaign(key)

    waiting = wait_for(
        lambda: (r := _campaigns(client))["ready"] == 1 and r, 30, "the creation job waiting in `campaigns`"
    )
    assert waiting["consumers"] == 0 and not waiting["listed"], waiting
    assert _status(cid) == "creating"
    # The minute, without waiting it: the instant the first look recorded, moved back past it.
    assert UnconsumedQueue.objects.filter(queue=CAMPAIGNS).update(
        since=timezone.now() - timedelta(seconds=61)
    )
    report = _campaigns(client, "?queues=1")
    assert report["http"] == 503 and report["listed"] and report["unconsumed_seconds"] >= 61, report
    assert client.get("/readyz").status_code == 200, "the API still accepts"
    samples = scrape(client)
    assert value(samples, "smsgw_queue_unconsumed_seconds", queue=CAMPAIGNS) >= 61
    assert value(samples, "smsgw_queue_ready_messages", queue=CAMPAIGNS) == 1
    assert value(samples, "smsgw_queue_oldest_age_seconds", queue=CAMPAIGNS) > 0, "the job's publish time"

    worker = pipeline.worker("campaigns", queues=CAMPAIGNS, concurrency=1)
    consumed = wait_for(
        lambda: (r := _campaigns(client, "?queues=1"))["consumers"] == 1 and r["ready"] == 0 and r,
        60,
        "the worker to record itself and take the job",
    )
    assert consumed["http"] == 200 and not consumed["listed"] and consumed["unconsumed_seconds"] == 0
    made = wait_for(lambda: (s := _status(cid)) != "creating" and s, 60, "the campaign to be made")
    assert made == "active"
    rows = list(QueueConsumer.objects.values_list("hostname", "queue", "stopped"))
    assert [(q, stopped) for _, q, stopped in rows] == [(CAMPAIGNS, False)], "only the queue it consumes"
    assert rows[0][0].startswith("campaigns@")
    samples = scrape(client)
    assert value(samples, "smsgw_queue_consumers", queue=CAMPAIGNS) == 1
    assert value(samples, "smsgw_queue_unconsumed_seconds", queue=CAMPAIGNS) == 0
    assert value(samples, "smsgw_queue_oldest_age_seconds", queue=CAMPAIGNS) == 0, "empty again"
    assert value(samples, "smsgw_worker_processes", queue=CAMPAIGNS) == 1, "its pool: concurrency 1"
    assert value(samples, "smsgw_worker_busy_processes", queue=CAMPAIGNS) in (0, 1)
    assert value(samples, "smsgw_queue_consumers", queue="sweep") == 0

    worker.stop()  # SIGTERM to its group: a warm shutdown says goodbye before the process ends
    assert list(QueueConsumer.objects.values_list("stopped", flat=True)) == [True], "goodbye recorded"
    assert _campaigns(client)["consumers"] == 0, "gone at once, not after the stale time"


def test_a_killed_worker_stops_counting_as_a_consumer_once_its_heartbeats_go_stale(pipeline, settings):
    settings.QUEUE_CONSUMER_STALE_SECONDS = 3.0
    pipeline.env["SMSGW_QUEUE_CONSUMER_HEARTBEAT_SECONDS"] = "1"
    _, key = tenant_with_key("queues")

    def campaigns():
        return next(s for s in queue_states_observe() if s.name == CAMPAIGNS)

    worker = pipeline.worker("campaigns", queues=CAMPAIGNS, concurrency=1)
    wait_for(lambda: campaigns().consumers == 1, 30, "the worker's heartbeat")
    worker.kill9()
    cid = _post_campaign(key)
    gone = wait_for(
        lambda: (s := campaigns()).consumers == 0 and s.ready == 1 and s,
        30,
        "the killed worker's heartbeats to go stale with the job waiting",
    )
    assert gone.unconsumed_seconds is not None and gone.unconsumed_seconds >= 0
    assert list(QueueConsumer.objects.values_list("stopped", flat=True)) == [False], "no goodbye: killed"
    assert wait_for(lambda: campaigns().unconsumed_seconds > 1, 30, "the unconsumed time to grow")
    assert _status(cid) == "creating"
