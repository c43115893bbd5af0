"""The bench tenant and its messages: every scenario starts from ``bench_reset`` and loads its messages
in one statement with ``messages_load``."""

from __future__ import annotations

from django.conf import settings
from django.db import connection

from scheduling.models import Message
from smsgw.models import Tenant

# The sender pool's column, from the model: its name and the field's differ for a release.
_POOL = Message._meta.get_field("sender_pool").column

BENCH_TENANT = "bench"


def sender_number(i: int) -> str:
    """The i-th From number ``messages_load(senders=...)`` uses."""
    return f"+1415556{i:04d}"


# A bench tenant is unlimited (0): the benchmarks measure the gateway, not a new tenant's quotas.
UNLIMITED = {"daily_message_quota": 0, "max_pending_scheduled": 0, "send_rate_per_second": 0}


def bench_reset() -> Tenant:
    """Empty the message tables (the bench database only), drop the pacing state an earlier scenario
    configured (sender and account rates, rate buckets, circuits), and return the bench tenant. Left in
    place, that state paced the next scenario: after `bench paced --senders 10` (an account rate of
    200/s) a 200/s `bench soak` fell 2 s further behind every minute."""
    from delivery.models import AccountCapacity, ProviderCircuit, RateBucket, SenderCapacity

    with connection.cursor() as cur:
        cur.execute("TRUNCATE scheduling_messageevent, delivery_attempt, scheduling_message CASCADE")
    for model in (SenderCapacity, AccountCapacity, RateBucket, ProviderCircuit):
        model.objects.all().delete()
    tenant, _ = Tenant.objects.get_or_create(
        # No API rate limit or quota: the benchmarks measure the gateway, not the limiter.
        slug=BENCH_TENANT,
        defaults={
            "name": "Benchmark",
            "default_from": "+14155550100",
            "api_rate_per_second": 0,
            **UNLIMITED,
        },
    )
    return tenant


def messages_load(
    tenant: Tenant,
    n: int,
    *,
    first_due,
    spread_seconds: float = 0.0,
    offset: int = 0,
    priority: str = "transactional",
    senders: int = 0,
) -> None:
    """Insert n accepted messages in one statement (as the API would store them, minus the per-request
    work). ``spread_seconds`` > 0 spreads due times evenly over that window; ``senders`` > 0 spreads
    them round-robin over that many From numbers (``sender_number(i)``) instead of the tenant's one."""
    step = spread_seconds / n if spread_seconds else 0.0
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO scheduling_message (public_id, tenant_id, "to", from_number, __POOL__,
                body, encoding, segments, priority, metadata, requested_send_at, requested_timezone,
                dst_policy, dst_adjustment, due_at, expires_at, status, status_reason, version, run_after,
                attempt_count, provider, provider_status, error_code, created_at, updated_at,
                request_fingerprint, route_plan)
            SELECT 'msg_' || substr(md5(random()::text || g::text), 1, 24), %s,
                   '+1415' || lpad((2000000 + g)::text, 7, '0'),
                   CASE WHEN %s > 0 THEN '+1415556' || lpad((g %% GREATEST(%s, 1))::text, 4, '0')
                        ELSE %s END, '',
                   'Benchmark message ' || g, 'GSM-7', 1, %s, '{}', '', '', 'earlier', 'none',
                   %s + make_interval(secs => (g - %s) * %s), %s + interval '2 days', 'scheduled', '', 1,
                   %s + make_interval(secs => (g - %s) * %s), 0, %s, '', '', now(), now(), '', '[]'
            FROM generate_series(%s, %s) AS g
            """.replace("__POOL__", _POOL),
            [
                tenant.pk,
                senders,
                senders,
                tenant.default_from or "+14155550100",
                priority,
                first_due,
                offset,
                step,
                first_due,
                first_due,
                offset,
                step,
                settings.SMSGW_PROVIDER,
                offset,
                offset + n - 1,
            ],
        )
