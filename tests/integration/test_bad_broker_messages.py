"""A broker message a worker cannot run never stops it, and never comes back: real workers on the Redis
broker, poison pushed onto the bulk queue by hand (smsgw.runtime.transports,
smsgw.runtime.worker_consumer)."""

from __future__ import annotations

import json

import pytest
import redis
from django.conf import settings
from django.db import connection
from rest_framework.test import APIClient

from config.celery import app
from scheduling.models import Message, Status
from tests.factories import recipient, tenant_with_key
from tests.metrics import TOKEN, scrape, value
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SECRET_ARG = "poison-body-that-must-not-be-logged"


@pytest.fixture
def redis_broker():
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        pytest.skip("pushes raw items onto the Redis broker's lists")
    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


def test_poison_on_the_bulk_queue_is_discarded_once_and_both_send_pools_go_on(
    pipeline, redis_broker, settings
):
    settings.METRICS_TOKEN = TOKEN
    _, key = tenant_with_key("poison")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    connection.close()
    # As production runs them: one pool per priority class (docs/deploy.md, "Production").
    tx = pipeline.worker("tx", queues="sweep,send.transactional,reconcile,receipts,webhooks,campaigns")
    bulk = pipeline.worker("bulk", queues="send.bulk")
    pipeline.beat()
    before = scrape()
    # Items that are not kombu messages (kombu's Redis transport keeps a queue as a list of that name),
    # and a real Celery message for a task nobody registered, carrying text that must stay out of logs.
    for item in (b"", b"{broken", b'["not", "a", "message"]'):
        redis_broker.lpush("send.bulk", item)
    app.send_task("smsgw.no_such_task", args=[SECRET_ARG], queue="send.bulk")

    ids = []
    for i, priority in enumerate(("transactional", "bulk", "transactional", "bulk")):
        resp = api.post(
            "/v1/messages",
            {"to": recipient(i), "body": f"after poison {i}", "priority": priority},
            format="json",
        )
        assert resp.status_code == 201, resp.content
        ids.append(resp.json()["id"])
    connection.close()
    pks = list(Message.objects.filter(public_id__in=ids).values_list("pk", flat=True))
    pipeline.wait_all_final(pks, timeout=90)

    assert set(Message.objects.filter(pk__in=pks).values_list("status", flat=True)) == {Status.SENT}
    assert pipeline.submissions_by_recipient() == {recipient(i): 1 for i in range(4)}
    assert tx.popen.poll() is None and bulk.popen.poll() is None

    # Each poison item was discarded once, and nothing of it is left to come back: the bulk list is
    # empty and no message is held unacknowledged (a rejected one is not requeued).
    def drained() -> bool:
        held = [json.loads(v)[0] for v in redis_broker.hvals("unacked")]  # [message, exchange, routing key]
        return redis_broker.llen("send.bulk") == 0 and not any(
            m.get("headers", {}).get("task") == "smsgw.no_such_task" for m in held
        )

    wait_for(drained, 30, "the bulk list empty and the unknown task not held")
    after = scrape()
    for reason, n in (("empty", 1), ("not_json", 1), ("not_a_message", 1), ("unknown_task", 1)):
        grown = value(after, "smsgw_broker_discarded_total", queue="send.bulk", reason=reason) - value(
            before, "smsgw_broker_discarded_total", queue="send.bulk", reason=reason
        )
        assert grown == n, (reason, bulk.log()[-3000:])
    log = bulk.log()
    assert log.count("broker: discarded") >= 2, log[-3000:]  # repeats within 10 s are folded into one line
    assert "task smsgw.no_such_task, unknown_task" in log
    assert SECRET_ARG not in log
    assert "Unrecoverable error" not in log
