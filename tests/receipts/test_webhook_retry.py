"""The webhook retry schedule (receipts.webhook_retry, docs/webhooks.md "Retries"): a deadline, not a count.
With the defaults the last attempt is at least 72 hours after the first, every wait is bounded, and the
waits grow exponentially, whatever the jitter draws; the delivery worker applies it and dead-letters after
the window."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings as project_settings
from django.utils import timezone

from receipts.models import WebhookDelivery, WebhookStatus
from receipts.webhook_retry import retry_at, retry_offsets
from receipts.webhooks import webhooks_deliver_due
from scheduling.lifecycle import transitions
from scheduling.models import Status
from tests.factories import message, tenant_with_key

HOUR = 3600.0
DEFAULTS = {
    "window": project_settings.WEBHOOK_RETRY_WINDOW_SECONDS,
    "base": project_settings.WEBHOOK_RETRY_BASE_SECONDS,
    "max_delay": project_settings.WEBHOOK_RETRY_MAX_DELAY_SECONDS,
}


def test_the_defaults_are_three_days_five_seconds_and_six_hours():
    assert DEFAULTS == {"window": 3 * 24 * HOUR, "base": 5.0, "max_delay": 6 * HOUR}


@pytest.mark.parametrize("jitter", [1.0, 0.75, 0.5])
def test_the_last_retry_is_at_least_72_hours_after_the_first_attempt_and_waits_are_bounded(jitter):
    offsets = retry_offsets(**DEFAULTS, jitter=jitter)
    assert offsets[0] == 0.0
    assert offsets[-1] >= 72 * HOUR
    assert offsets[-1] == DEFAULTS["window"]  # the last attempt is at the deadline itself
    waits = [b - a for a, b in itertools.pairwise(offsets)]
    assert all(0 < w <= DEFAULTS["max_delay"] for w in waits)
    # Before the deadline's clamp: at least the base (times the jitter), and never shrinking.
    assert all(w >= DEFAULTS["base"] * jitter for w in waits[:-1])
    assert all(b >= a - 1e-6 for a, b in itertools.pairwise(waits[:-1]))  # (float sums)
    assert 15 <= len(offsets) <= 60  # a few dozen attempts over three days, not thousands


def test_the_waits_grow_exponentially_until_the_max_delay():
    offsets = retry_offsets(**DEFAULTS)
    assert offsets[:6] == [0.0, 5.0, 10.0, 20.0, 40.0, 80.0]
    first_capped = next(i for i, (a, b) in enumerate(itertools.pairwise(offsets)) if b - a == 6 * HOUR)
    assert offsets[first_capped] < 12 * HOUR  # the cap is reached within the first half day


def test_a_random_jitter_keeps_the_guarantees():
    rng = random.Random(42)
    since = datetime(2026, 1, 1, tzinfo=UTC)
    at: datetime | None = since
    times = []
    while at is not None:
        times.append(at)
        at = retry_at(since=since, failed_at=at, **DEFAULTS, jitter=rng.uniform(0.5, 1.0))
    assert times[-1] - times[0] >= timedelta(hours=72)
    assert all(timedelta(0) < b - a <= timedelta(hours=6) for a, b in itertools.pairwise(times))


def test_no_retry_once_the_window_is_over():
    since = datetime(2026, 1, 1, tzinfo=UTC)
    end = since + timedelta(seconds=DEFAULTS["window"])
    assert retry_at(since=since, failed_at=end, **DEFAULTS) is None
    assert retry_at(since=since, failed_at=end + timedelta(hours=1), **DEFAULTS) is None
    assert retry_at(since=since, failed_at=end - timedelta(minutes=1), **DEFAULTS) == end


@pytest.mark.django_db
def test_the_worker_retries_inside_the_window_and_dead_letters_after_it(settings):
    """A receiver that is down: the first failure opens the window, the next attempt comes within the
    schedule's bounds; a failure after the window's end dead-letters the delivery."""
    settings.WEBHOOK_ALLOW_PRIVATE = settings.WEBHOOK_ALLOW_HTTP = True
    tenant, _ = tenant_with_key("acme")
    tenant.webhook_url, tenant.webhook_secret = "http://127.0.0.1:9/down", "whsec_" + "A" * 32
    tenant.save(update_fields=["webhook_url", "webhook_secret"])
    msg = message(tenant)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    before = timezone.now()
    assert webhooks_deliver_due() == 1
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == WebhookStatus.PENDING and delivery.attempts == 1
    assert delivery.retrying_since is not None and delivery.retrying_since >= before
    wait = (delivery.next_attempt_at - timezone.now()).total_seconds()
    assert 0 < wait <= settings.WEBHOOK_RETRY_BASE_SECONDS

    # Three days later, still down: the attempt at the deadline fails, and that is the last one.
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        retrying_since=delivery.retrying_since - timedelta(seconds=settings.WEBHOOK_RETRY_WINDOW_SECONDS),
        next_attempt_at=timezone.now(),
    )
    assert webhooks_deliver_due() == 1
    delivery.refresh_from_db()
    assert delivery.status == WebhookStatus.DEAD and delivery.attempts == 2
