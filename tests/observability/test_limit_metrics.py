"""Quota and rate-limit refusals are counted where they are decided (the real API, the real buckets)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.factories import recipient, tenant_with_key
from tests.metrics import TOKEN, scrape, value

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _token(settings):
    settings.METRICS_TOKEN = TOKEN


def api_for(slug, **tenant_fields):
    _, key = tenant_with_key(slug, **tenant_fields)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return api


def post(api, i):
    return api.post("/v1/messages", {"to": recipient(i), "body": "hi"}, format="json")


def test_quota_refusals_are_counted_by_quota(client):
    pending, daily = api_for("pending", max_pending_scheduled=2), api_for("daily", daily_message_quota=1)
    before = scrape(client)
    assert [post(pending, i).status_code for i in range(3)] == [201, 201, 429]
    assert [post(daily, i).status_code for i in range(2)] == [201, 429]
    after = scrape(client)
    for quota in ("max_pending_scheduled", "daily_message_quota"):
        got = value(after, "smsgw_quota_rejections_total", quota=quota)
        assert got - value(before, "smsgw_quota_rejections_total", quota=quota) == 1, quota


def test_rate_limited_requests_are_counted(client, settings):
    settings.RATELIMIT_URL = "database"
    settings.API_RATE_PER_SECOND = 1
    settings.API_RATE_BURST_SECONDS = 2.0  # bursts of 2
    api = api_for("limited")
    before = value(scrape(client), "smsgw_rate_limit_rejections_total")
    codes = [api.get("/v1/messages").status_code for _ in range(4)]
    assert codes.count(429) >= 1
    assert value(scrape(client), "smsgw_rate_limit_rejections_total") - before == codes.count(429)
