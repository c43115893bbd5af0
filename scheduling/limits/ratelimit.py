"""API rate limiting per API key, shared by every web process and host.

GCRA (a token bucket kept as one "theoretical arrival time" per key): the key's tenant allows ``rate``
requests per second (``Tenant.api_rate_per_second``, else SMSGW_API_RATE_PER_SECOND; 0 = unlimited) with
bursts of up to ``rate * SMSGW_API_RATE_BURST_SECONDS`` requests. One round trip per request:

* Redis (SMSGW_RATELIMIT_URL, by default the broker's URL when the broker is Redis): one Lua script,
  atomic on the server, on the server's clock (hosts' clocks may differ);
* otherwise the database (embedded SQLite, RabbitMQ deployments): one upsert statement
  (INSERT ... ON CONFLICT DO UPDATE ... RETURNING), atomic in itself; on PostgreSQL on its clock.

A request over the limit gets 429 ``rate_limited`` with Retry-After. Every limited response, accepted or
not, carries ``RateLimit-Limit`` (the burst), ``RateLimit-Remaining``, ``RateLimit-Reset`` (seconds until
the bucket is full again) and ``RateLimit-Policy`` (``<burst>;w=<seconds>``). Requests without an API key
(health, the OpenAPI schema, provider callbacks) are never limited. If Redis cannot be reached the request
is let through (and logged): the limiter protects the API, it must not take it down.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from functools import cache

from django.conf import settings
from django.db import connection
from rest_framework.throttling import BaseThrottle

from scheduling.limits.models import ApiRateBucket
from smsgw.domain_errors import RateLimited
from smsgw.observability import events

log = logging.getLogger(__name__)

REQUEST_ATTR = "smsgw_ratelimit"
HEADERS = ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy")


def rate_limited(*, wait: int, limit: int, rate: int) -> RateLimited:
    """The refusal, answered 429 ``rate_limited`` with Retry-After."""
    return RateLimited(
        f"Too many requests for this API key: at most {rate} per second (bursts of {limit}); "
        f"retry in {wait} s.",
        retry_after=wait,
    )


@dataclass(frozen=True)
class Outcome:
    allowed: bool
    limit: int  # the burst: how many requests a full bucket allows at once
    remaining: int
    reset: float  # seconds until the bucket is full again
    retry_after: float  # seconds until the next request would be allowed (0 when allowed)
    period: float  # seconds a full bucket takes to refill

    def headers(self) -> dict[str, str]:
        return {
            "RateLimit-Limit": str(self.limit),
            "RateLimit-Remaining": str(self.remaining),
            "RateLimit-Reset": str(math.ceil(self.reset)),
            "RateLimit-Policy": f"{self.limit};w={math.ceil(self.period)}",
        }


def _outcome(allowed: bool, tat: float, now: float, interval: float, burst: int) -> Outcome:
    tau = interval * burst
    ahead = max(0.0, tat - now)  # how far the bucket is drawn down, in seconds
    # Epoch seconds as doubles carry ~0.5 us of rounding (and Redis returns them as decimal text): a
    # thousandth of a token of slack keeps that from showing one request fewer than there is.
    remaining = max(0, min(burst, math.floor((tau - ahead) / interval + 1e-3)))
    retry = 0.0 if allowed else max(0.0, ahead + interval - tau)
    return Outcome(allowed, burst, remaining, ahead, retry, tau)


# KEYS[1] the bucket; ARGV: emission interval T, burst tolerance tau (= T * burst), key TTL (ms).
# Returns {allowed, tat, now} with times as strings (Lua numbers would be truncated to integers).
_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local interval = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local new = tat + interval
if new - now <= tau then
  redis.call('SET', KEYS[1], string.format('%.6f', new), 'PX', ARGV[3])
  return {1, string.format('%.6f', new), string.format('%.6f', now)}
end
return {0, string.format('%.6f', tat), string.format('%.6f', now)}
"""


@cache
def _redis_script(url: str):
    import redis

    client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
    return client.register_script(_LUA)


def _redis_take(url: str, key: str, interval: float, burst: int) -> tuple[bool, float, float]:
    ttl_ms = max(1000, math.ceil(interval * burst * 1000) + 1000)
    allowed, tat, now = _redis_script(url)(
        keys=[f"smsgw:ratelimit:{key}"], args=[interval, interval * burst, ttl_ms]
    )
    return bool(int(allowed)), float(tat), float(now)


def _db_take(key: str, interval: float, burst: int) -> tuple[bool, float, float]:
    tau = interval * burst
    table = connection.ops.quote_name(ApiRateBucket._meta.db_table)
    if connection.vendor == "postgresql":
        now_sql, params_now = "EXTRACT(EPOCH FROM clock_timestamp())::float8", []
        greatest = "GREATEST"
    else:
        now_sql, params_now = "%s", [time.time()]
        greatest = "MAX"
    # The proposed row carries now (seen) and now + T (tat); on conflict the SET expressions read the
    # stored row, so the whole GCRA step is this one statement, atomic under the row's lock.
    ok = f"{greatest}(b.tat, excluded.seen) + %s - excluded.seen <= %s"
    sql = (
        f"INSERT INTO {table} AS b (key, tat, allowed, seen) "  # noqa: S608 - names from model metadata
        f"SELECT %s, n.now + %s, TRUE, n.now FROM (SELECT {now_sql} AS now) AS n WHERE TRUE "
        f"ON CONFLICT (key) DO UPDATE SET "
        f"tat = CASE WHEN {ok} THEN {greatest}(b.tat, excluded.seen) + %s ELSE b.tat END, "
        f"allowed = {ok}, seen = excluded.seen "
        f"RETURNING allowed, tat, seen"
    )
    params: list[str | float] = [key, interval, *params_now, interval, tau, interval, interval, tau]
    with connection.cursor() as cur:
        cur.execute(sql, params)
        allowed, tat, seen = cur.fetchone()
    return bool(allowed), float(tat), float(seen)


def ratelimit_url() -> str:
    url = settings.RATELIMIT_URL
    return url if url.startswith(("redis://", "rediss://", "unix://")) else ""


def limits_for(tenant) -> tuple[int, int]:
    """(requests per second, burst) for a tenant's keys; rate 0 = unlimited."""
    rate = tenant.api_rate_per_second
    if rate is None:
        rate = settings.API_RATE_PER_SECOND
    burst = max(1, math.ceil(rate * settings.API_RATE_BURST_SECONDS))
    return rate, burst


# After a Redis failure this process lets requests through unlimited for this long before it tries
# again, so an outage costs one connect timeout per process per interval, not one per request.
REDIS_RETRY_SECONDS = 5.0
_redis_down_until = 0.0


def take(key: str, *, rate: int, burst: int) -> Outcome | None:
    """One request from ``key``'s bucket: allowed or not, and the state for the headers; None when the
    limiter cannot be reached (the request is let through, without headers that would be guesses)."""
    global _redis_down_until
    interval = 1.0 / rate
    url = ratelimit_url()
    if not url:
        return _outcome(*_db_take(key, interval, burst), interval, burst)
    if time.monotonic() < _redis_down_until:
        return None
    try:
        allowed, tat, now = _redis_take(url, key, interval, burst)
    except Exception as exc:  # any Redis failure: the limiter must not take the API down
        _redis_down_until = time.monotonic() + REDIS_RETRY_SECONDS
        log.warning(
            "rate limiter unavailable (%s); requests allowed for %.0f s",
            type(exc).__name__,
            REDIS_RETRY_SECONDS,
        )
        return None
    return _outcome(allowed, tat, now, interval, burst)


class ApiKeyRateThrottle(BaseThrottle):
    """DRF throttle (runs after authentication): per API key, limits from its tenant."""

    def allow_request(self, request, view) -> bool:
        principal = request.user
        api_key = getattr(principal, "api_key", None)
        if api_key is None:  # no key: health, schema, provider callbacks
            return True
        rate, burst = limits_for(principal.tenant)
        if rate <= 0:
            return True
        outcome = take(api_key.prefix, rate=rate, burst=burst)
        if outcome is None:
            return True
        setattr(request._request, REQUEST_ATTR, outcome)
        if not outcome.allowed:
            events.rate_limited()
            raise rate_limited(wait=max(1, math.ceil(outcome.retry_after)), limit=burst, rate=rate)
        return True


class RateLimitHeadersMiddleware:
    """Copies the limiter's state onto the response, whatever the view answered (2xx or an error)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        outcome = getattr(request, REQUEST_ATTR, None)
        if outcome is not None:
            for name, value in outcome.headers().items():
                response[name] = value
        return response
