"""Tenant webhook attempts are counted by result (retry, dead, delivered) against a real receiver, and
the outbox figures follow the rows."""

from __future__ import annotations

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from receipts.models import WebhookDelivery, WebhookStatus
from receipts.webhooks import webhooks_deliver_due
from scheduling.lifecycle import transitions
from scheduling.models import Status
from tests.factories import message, tenant_with_key
from tests.metrics import TOKEN, scrape, value
from tests.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.django_db


def test_webhook_retries_then_dead_letter_are_counted(settings, client):
    settings.METRICS_TOKEN = TOKEN
    settings.WEBHOOK_ALLOW_PRIVATE = settings.WEBHOOK_ALLOW_HTTP = True
    settings.WEBHOOK_RETRY_BASE_SECONDS = 0.0
    tenant, key = tenant_with_key("acme")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    receiver = WebhookReceiver(fail_first=2).start()
    try:
        assert api.put("/v1/webhook", {"url": receiver.url}, format="json").status_code == 200
        msg = message(tenant)
        transitions.transition(
            msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued"
        )
        before = scrape(client)
        assert value(before, "smsgw_webhook_outbox") == 1
        for attempt in range(2):
            if attempt == 1:  # the retry window is over by the second attempt: dead
                settings.WEBHOOK_RETRY_WINDOW_SECONDS = 0
            WebhookDelivery.objects.filter(status=WebhookStatus.PENDING).update(
                next_attempt_at=timezone.now()
            )
            webhooks_deliver_due()
        after = scrape(client)
    finally:
        receiver.stop()
    for result, n in (("retry", 1), ("dead", 1), ("delivered", 0)):
        got = value(after, "smsgw_webhook_attempts_total", result=result)
        assert got - value(before, "smsgw_webhook_attempts_total", result=result) == n, result
    assert value(after, "smsgw_webhook_outbox") == 0
