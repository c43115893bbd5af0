"""Every benchmark scenario starts from ``bench.harness.data.bench_reset``: no message, and no pacing state an
earlier scenario configured. `bench paced --senders 10` used to leave an account rate of 200/s behind,
and a 200/s `bench soak` run next fell 2 s further behind every minute (docs/benchmarks.md)."""

import pytest
from django.db import connection
from django.utils import timezone

from bench.harness import data
from delivery.models import AccountCapacity, ProviderCircuit, RateBucket, SenderCapacity
from scheduling.models import Message
from tests.factories import message, tenant_with_key

pytestmark = pytest.mark.django_db(transaction=True)  # TRUNCATE, as the bench runs it

ACCOUNT = "AC" + "0" * 32


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the benchmarks run on PostgreSQL (TRUNCATE)")
def test_a_scenario_starts_without_the_messages_and_the_pacing_an_earlier_one_left():
    message(tenant_with_key("earlier")[0])
    SenderCapacity.objects.create(
        provider="twilio", account=ACCOUNT, sender=data.sender_number(0), segments_per_second=20
    )
    AccountCapacity.objects.create(provider="twilio", account=ACCOUNT, segments_per_second=200)
    now = timezone.now()
    RateBucket.objects.create(
        key=f"twilio|{ACCOUNT}|account|",
        kind="account",
        rate_configured=200,
        rate_effective=100,
        tat=now,
        projected_until=now,
        updated_at=now,
    )
    ProviderCircuit.objects.create(
        provider="twilio", account=ACCOUNT, state="open", opened_at=now, window_started_at=now, updated_at=now
    )

    tenant = data.bench_reset()

    assert tenant.slug == data.BENCH_TENANT
    assert not SenderCapacity.objects.exists()
    assert not AccountCapacity.objects.exists()
    assert not RateBucket.objects.exists()
    assert not ProviderCircuit.objects.exists()
    assert not Message.objects.exists()
