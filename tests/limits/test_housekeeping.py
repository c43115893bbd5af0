"""Pruning the limits tables: quota windows older than the kept month go, recent ones and today's stay;
idle (full) rate buckets go, and a bucket still inside its window stays, so a key keeps its limit."""

from __future__ import annotations

import time
from datetime import date, timedelta

import pytest
from rest_framework.test import APIClient

from scheduling.limits.housekeeping import QUOTA_WINDOW_KEEP_DAYS, limits_prune
from scheduling.limits.models import ApiRateBucket, QuotaWindow
from tests.factories import tenant_with_key

pytestmark = pytest.mark.django_db


def test_old_quota_windows_pruned_recent_and_today_kept():
    tenant, _ = tenant_with_key("prune", daily_message_quota=10)
    today = date(2026, 12, 1)
    days = [
        today - timedelta(days=n) for n in (0, 1, QUOTA_WINDOW_KEEP_DAYS, QUOTA_WINDOW_KEEP_DAYS + 2, 400)
    ]
    for d in days:
        QuotaWindow.objects.create(tenant=tenant, day=d, booked=3, released=2)
    report = limits_prune(today=today, now=time.time())
    assert report.quota_windows == 2
    kept = set(QuotaWindow.objects.values_list("day", flat=True))
    assert kept == set(days[:3])


def test_idle_rate_buckets_pruned_busy_bucket_kept(settings):
    settings.RATELIMIT_URL = "database"
    settings.API_RATE_PER_SECOND = 1
    settings.API_RATE_BURST_SECONDS = 2.0
    _, key = tenant_with_key("busy")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    statuses = [api.get("/v1/messages").status_code for _ in range(3)]
    assert statuses == [200, 200, 429]  # the burst (2) is spent: the bucket is not full
    now = time.time()
    ApiRateBucket.objects.create(key="idle-key", tat=now - 3600, allowed=True, seen=now - 3601)
    report = limits_prune(now=now)
    assert report.rate_buckets == 1
    assert not ApiRateBucket.objects.filter(key="idle-key").exists()
    # The busy key's row survived: its limit still holds.
    assert ApiRateBucket.objects.count() == 1
    assert api.get("/v1/messages").status_code == 429
