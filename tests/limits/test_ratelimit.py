"""API rate limiting per key: RateLimit-* headers on every limited response (2xx and errors), 429
rate_limited with Retry-After past the burst, limits per tenant with a default from the settings, and
no limit where there is no key (health, schema, provider callbacks). Both backends: Redis (when the test
broker is Redis) and the database."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from rest_framework.test import APIClient

from scheduling.limits.models import ApiRateBucket
from smsgw.models import Tenant
from tests.factories import recipient, tenant_with_key
from tests.waiting import wait_for

# SQLite half too: the rate limit's database backend is the embedded mode's.
pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

HEADERS = ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy")


@pytest.fixture(params=["database", "redis"])
def backend(request, settings):
    if request.param == "redis":
        if not django_settings.CELERY_BROKER_URL.startswith("redis"):
            pytest.skip("the Redis backend is tested where the test broker is Redis")
        settings.RATELIMIT_URL = django_settings.CELERY_BROKER_URL
    else:
        settings.RATELIMIT_URL = "database"
    settings.API_RATE_PER_SECOND = 2
    settings.API_RATE_BURST_SECONDS = 2.0  # bursts of 4
    return request.param


@pytest.fixture
def slow_refill(backend, settings):
    """The same bursts of 4, refilled one token every 20 s: a test that needs the bucket to stay empty
    while it makes a few more requests does not depend on how fast a loaded machine answers them (at 2 a
    second, five requests that took over 0.5 s found a token back)."""
    settings.API_RATE_PER_SECOND = 0.05
    settings.API_RATE_BURST_SECONDS = 80.0
    return backend


def client(**tenant_fields):
    tenant, key = tenant_with_key("limited", **tenant_fields)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    api.tenant = tenant
    return api


def test_every_limited_response_carries_the_ratelimit_headers(backend):
    api = client()
    first = api.get("/v1/messages")
    second = api.post("/v1/messages", {"to": recipient(0), "body": "hi"}, format="json")
    missing = api.get("/v1/messages/msg_nope")  # an error response keeps them too
    invalid = api.post("/v1/messages", {"to": "nope", "body": "hi"}, format="json")

    assert [r.status_code for r in (first, second, missing, invalid)] == [200, 201, 404, 400]
    for r in (first, second, missing, invalid):
        assert all(h in r for h in HEADERS), dict(r.items())
        assert r["RateLimit-Limit"] == "4" and r["RateLimit-Policy"] == "4;w=2"
    assert [int(r["RateLimit-Remaining"]) for r in (first, second, missing, invalid)] == [3, 2, 1, 0]
    assert 0 < int(invalid["RateLimit-Reset"]) <= 2


def test_past_the_burst_a_429_rate_limited_with_retry_after_and_then_allowed_again(backend):
    api = client()
    assert [api.get("/v1/messages").status_code for _ in range(4)] == [200] * 4

    refused = api.get("/v1/messages")

    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limited"
    assert int(refused["Retry-After"]) == 1  # one request every 0.5 s
    assert refused["RateLimit-Remaining"] == "0"
    # A refused request takes nothing from the bucket: the next token comes on time.
    wait_for(lambda: api.get("/v1/messages").status_code == 200, timeout=5, what="a token back")


@pytest.mark.parametrize(
    ("tenant_rate", "expected_limit"),
    [(None, "4"), (10, "20"), (1, "2")],
    ids=["setting default", "tenant higher", "tenant lower"],
)
def test_the_limit_is_the_tenants_or_the_default(backend, tenant_rate, expected_limit):
    api = client(api_rate_per_second=tenant_rate)
    resp = api.get("/v1/messages")
    assert resp["RateLimit-Limit"] == expected_limit
    assert resp["RateLimit-Remaining"] == str(int(expected_limit) - 1)


def test_a_tenant_with_a_lower_limit_is_refused_sooner(backend):
    api = client(api_rate_per_second=1)  # bursts of 2
    assert [api.get("/v1/messages").status_code for _ in range(3)] == [200, 200, 429]


def test_a_tenant_without_limit_is_never_limited(backend):
    api = client(api_rate_per_second=0)
    responses = [api.get("/v1/messages") for _ in range(12)]
    assert {r.status_code for r in responses} == {200}
    assert not any("RateLimit-Limit" in r for r in responses)


def test_each_key_has_its_own_bucket(slow_refill):
    api = client()
    other_tenant, other_key = tenant_with_key("other")
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {other_key}")
    for _ in range(4):
        api.get("/v1/messages")
    assert api.get("/v1/messages").status_code == 429
    assert other.get("/v1/messages").status_code == 200
    assert other_tenant.pk != api.tenant.pk


@pytest.mark.parametrize(
    ("method", "path"),
    [("get", "/healthz"), ("get", "/readyz"), ("get", "/v1/openapi.json"), ("post", "/receipts/twilio/")],
)
def test_health_schema_and_provider_callbacks_are_exempt(slow_refill, method, path):
    api = client()
    for _ in range(4):
        api.get("/v1/messages")
    assert api.get("/v1/messages").status_code == 429  # the key's bucket is empty ...

    responses = [getattr(api, method)(path) for _ in range(6)]  # ... and these still answer

    assert all(r.status_code != 429 for r in responses), [r.status_code for r in responses]
    assert not any("RateLimit-Limit" in r for r in responses)


def test_an_unauthenticated_request_is_refused_before_any_bucket_is_touched(backend):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION="Bearer sk_000000000000_nope")
    assert api.get("/v1/messages").status_code == 401
    assert not ApiRateBucket.objects.exists()


def test_the_database_backend_keeps_one_row_per_key(settings):
    settings.RATELIMIT_URL = "database"
    settings.API_RATE_PER_SECOND = 5
    api = client()
    for _ in range(3):
        api.get("/v1/messages")
    assert ApiRateBucket.objects.count() == 1
    Tenant.objects.filter(pk=api.tenant.pk).update(api_rate_per_second=0)
    assert "RateLimit-Limit" not in api.get("/v1/messages")


def test_an_unreachable_redis_lets_requests_through_without_headers(settings, monkeypatch):
    from scheduling.limits import ratelimit

    monkeypatch.setattr(ratelimit, "_redis_down_until", 0.0)
    settings.RATELIMIT_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    settings.API_RATE_PER_SECOND = 1
    api = client()
    responses = [api.get("/v1/messages") for _ in range(5)]
    assert {r.status_code for r in responses} == {200}
    assert not any("RateLimit-Limit" in r for r in responses)
