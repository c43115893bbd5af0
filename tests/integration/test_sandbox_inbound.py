"""A handset's reply across real processes: the provider's sandbox posts its incoming-message webhook
(POST /_sandbox/inbound, signed as the provider signs it) to the gateway's /inbound/<provider>/ on a real
gunicorn, which start_web pointed it at; the inbound worker (a real `celery worker` on the inbound queue,
ticked by a real `celery beat`) takes the STOP: it suppresses its sender for the tenant owning the number,
once for both copies."""

from __future__ import annotations

import urllib.request

import pytest
from django.db import connection

from delivery.models import Suppression
from inbound.models import InboundMessage
from tests.factories import SENDER, recipient, sender_for, tenant_with_key
from tests.harness import start_web
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
VONAGE_NUMBER = "+447400123456"


@pytest.mark.parametrize(("provider", "ours"), [("twilio", SENDER), ("vonage", VONAGE_NUMBER)])
def test_a_stop_from_the_sandbox_is_taken_by_the_gateway(provider_pipeline, provider, ours):
    tenant, _ = tenant_with_key("acme")
    if provider == "vonage":
        sender_for(tenant, VONAGE_NUMBER, provider="vonage")
    pipeline = provider_pipeline(provider)
    base = start_web(pipeline)
    pipeline.worker(queues="inbound")
    pipeline.beat()
    connection.close()
    pipeline.ready()
    # gunicorn loads the app at its first request: answered before the webhook's read timeout counts
    wait_for(lambda: urllib.request.urlopen(f"{base}/healthz", timeout=30).status == 200, 60, "the web")
    sandbox = pipeline.sandbox
    answer = sandbox.inbound(recipient(1), ours, "STOP", copies=2)  # a duplicate too
    (webhook_id,) = answer["ids"]

    def settled():
        counts = sandbox.stats()["inbound"]
        return counts["pending"] == 0 and counts["delivered"] + counts["failed"] == 2

    wait_for(settled, 30, "both deliveries answered")
    (logged,) = sandbox.inbound_log(webhook_id)
    assert logged["url"].endswith(f"/inbound/{provider}/")
    assert logged["statuses"] == [200, 200], logged
    assert logged["replies"] == []  # the gateway answers an empty TwiML: no reply sent
    stopped = Suppression.objects.filter(tenant=tenant, number=recipient(1))
    wait_for(stopped.exists, 30, "the STOP applied by the inbound worker")
    assert stopped.count() == 1
    assert InboundMessage.objects.get().keyword == "STOP"  # both copies: one message
