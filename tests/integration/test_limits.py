"""Tenant limits across processes: 16 concurrent clients against several gunicorn workers get exactly
the quota accepted (the rest 429 quota_exceeded, nothing else stored); an API key's rate limit is one
bucket shared by two separate web processes (Redis and database backends)."""

from __future__ import annotations

import http.client
import json
import math
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from scheduling.limits.models import QuotaWindow
from scheduling.models import Message, MessageEvent
from tests.factories import recipient, tenant_with_key
from tests.harness import start_web

pytestmark = pytest.mark.integration

CLIENTS = 16
QUOTA = 1000
ATTEMPTS = 1120  # 120 more than the quota: 70 per client


def request(base: str, method: str, path: str, key: str, body: dict | None = None) -> tuple[int, dict, dict]:
    url = urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, dict(resp.getheaders()), json.loads(data) if data else {}
    finally:
        conn.close()


@pytest.fixture
def needs_postgres():
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        pytest.skip("several web processes writing at once: PostgreSQL")


@pytest.mark.parametrize("quota", ["daily_message_quota", "max_pending_scheduled"])
def test_sixteen_concurrent_clients_get_exactly_the_quota(pipeline, needs_postgres, quota):
    tenant, key = tenant_with_key("busy", api_rate_per_second=0, **{quota: QUOTA})
    base = start_web(pipeline, workers=4)

    def client(n: int) -> list[tuple[int, dict]]:
        out = []
        for j in range(ATTEMPTS // CLIENTS):
            i = n * 1000 + j
            status, _, body = request(base, "POST", "/v1/messages", key, {"to": recipient(i), "body": "hi"})
            out.append((status, body))
        return out

    with ThreadPoolExecutor(CLIENTS) as pool:
        results = [r for batch in pool.map(client, range(CLIENTS)) for r in batch]

    codes = Counter(status for status, _ in results)
    assert codes == {201: QUOTA, 429: ATTEMPTS - QUOTA}, codes
    refused = [body["error"] for status, body in results if status == 429]
    assert {(e["code"], e["quota"], e["limit"]) for e in refused} == {("quota_exceeded", quota, QUOTA)}
    assert Message.objects.filter(tenant=tenant).count() == QUOTA
    assert MessageEvent.objects.filter(message__tenant=tenant).count() == QUOTA
    if quota == "daily_message_quota":
        assert QuotaWindow.objects.get(tenant=tenant).booked == QUOTA


@pytest.mark.parametrize("backend", ["redis", "database"])
def test_a_keys_rate_limit_is_shared_by_two_web_processes(pipeline, needs_postgres, backend):
    if backend == "redis" and not settings.CELERY_BROKER_URL.startswith("redis"):
        pytest.skip("the Redis backend needs the Redis test broker")
    _, key = tenant_with_key("limited", api_rate_per_second=1)
    burst = 20
    env = {"SMSGW_API_RATE_BURST_SECONDS": str(burst)}
    if backend == "database":
        env["SMSGW_RATELIMIT_URL"] = "database"
    first, second = start_web(pipeline, workers=2, **env), start_web(pipeline, workers=2, **env)

    started = time.monotonic()
    outcomes = [request(base, "GET", "/v1/messages", key)[:2] for base in (first, second) * burst]
    elapsed = time.monotonic() - started

    allowed = [status for status, _ in outcomes if status == 200]
    # One bucket for both: the burst plus what refilled meanwhile (1/s), never a burst per process.
    assert burst <= len(allowed) <= burst + math.ceil(elapsed) + 1, (len(allowed), elapsed)
    by_process = Counter((i % 2, status) for i, (status, _) in enumerate(outcomes))
    assert by_process[(0, 429)] and by_process[(1, 429)], by_process
    refused = [headers for status, headers in outcomes if status == 429]
    assert all(h["Retry-After"] == "1" and h["RateLimit-Limit"] == str(burst) for h in refused)
