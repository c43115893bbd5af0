"""Status look-ups for messages stuck at `sent`: the real Twilio adapter asks the real sandbox process
(Message fetch by sid); the answer goes through the receipt path, so the processor applies it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from delivery.models import ProviderCircuit
from delivery.providers import get_adapter
from receipts.lookup import GAVE_UP, lookup_soon, stale_sent_lookup_run
from receipts.models import ReceiptEvent, StatusLookup
from scheduling.models import Message, MessageEvent, Status
from tests.receipts.test_receipts import drain, sent_message, tenant  # noqa: F401
from tests.sandbox_process import SandboxProcess

pytestmark = pytest.mark.django_db
FROM = "+15005550006"
HOUR = 3600


@pytest.fixture(scope="module")
def sandbox():
    with SandboxProcess() as process:
        yield process


@pytest.fixture
def lookups(settings, sandbox):
    sandbox.reset()
    sandbox.config(callbacks_enabled=False)  # the final callback is lost: only a look-up can tell
    settings.TWILIO_API_BASE_URL = sandbox.base_url
    settings.TWILIO_ACCOUNT_SID = sandbox.account_sid
    settings.TWILIO_AUTH_TOKEN = sandbox.auth_token
    settings.STATUS_LOOKUP_AFTER_SECONDS = HOUR
    settings.STATUS_LOOKUP_MAX_TRIES = 3
    settings.STATUS_LOOKUP_RATE = 50.0
    settings.STATUS_LOOKUP_TIMEOUT_SECONDS = 2.0
    settings.STATUS_LOOKUP_BUDGET_SECONDS = 10.0
    get_adapter.cache_clear()
    yield sandbox
    get_adapter.cache_clear()


def stuck_sent(tenant, sandbox, *, sent_ago: float = 2 * HOUR) -> Message:  # noqa: F811
    sid = sandbox.client().messages.create(to="+14155550123", from_=FROM, body="hello").sid
    msg = sent_message(tenant, sid)
    Message.objects.filter(pk=msg.pk).update(sent_at=timezone.now() - timedelta(seconds=sent_ago))
    return msg


def test_stuck_sent_message_delivered_at_provider_becomes_delivered_from_a_lookup(lookups, tenant):  # noqa: F811
    lookups.config(callback_gap_ms=0)  # delivered at the provider as soon as it is sent
    msg = stuck_sent(tenant, lookups)
    fresh = stuck_sent(tenant, lookups, sent_ago=60)  # younger than the threshold: not asked

    counts = stale_sent_lookup_run()
    assert counts["looked_up"] == 1 and counts["final"] == 1
    receipt = ReceiptEvent.objects.get(provider_message_id=msg.provider_message_id)
    assert receipt.raw_status == "delivered" and receipt.payload["source"] == "lookup"
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.DELIVERED
    entry = MessageEvent.objects.get(message=msg, kind="delivered")
    assert entry.details["source"] == "lookup" and entry.details["provider_status"] == "delivered"
    fresh.refresh_from_db()
    assert fresh.status == Status.SENT and not StatusLookup.objects.filter(message=fresh).exists()
    assert stale_sent_lookup_run()["looked_up"] == 0  # nothing left at `sent` past the threshold


def test_a_message_asked_for_soon_is_looked_up_at_the_next_run_not_after_the_hour(lookups, tenant):  # noqa: F811
    # What a callback signed with a key we do not hold asks for (receipts.api): its message, sent a
    # minute ago, is looked up by sid at once, and its final status comes from the look-up.
    lookups.config(callback_gap_ms=0)
    msg = stuck_sent(tenant, lookups, sent_ago=60)
    other = stuck_sent(tenant, lookups, sent_ago=60)
    assert stale_sent_lookup_run()["looked_up"] == 0
    assert lookup_soon("twilio", msg.provider_message_id) == msg.pk
    counts = stale_sent_lookup_run()
    assert counts["looked_up"] == 1 and counts["final"] == 1
    drain()
    msg.refresh_from_db()
    other.refresh_from_db()
    assert (msg.status, other.status) == (Status.DELIVERED, Status.SENT)
    assert MessageEvent.objects.get(message=msg, kind="delivered").details["source"] == "lookup"


def test_still_sent_at_provider_is_looked_up_again_with_backoff_then_left_alone(lookups, tenant):  # noqa: F811
    lookups.config(callback_gap_ms=10 * HOUR * 1000)  # stays `sent` at the provider
    msg = stuck_sent(tenant, lookups)
    now = timezone.now()

    assert stale_sent_lookup_run(now=now)["not_final"] == 1
    assert stale_sent_lookup_run(now=now + timedelta(seconds=HOUR - 5))["looked_up"] == 0  # not yet
    assert stale_sent_lookup_run(now=now + timedelta(seconds=HOUR + 5))["not_final"] == 1
    # the delay doubles: 1 h, then 2 h
    assert stale_sent_lookup_run(now=now + timedelta(seconds=3 * HOUR - 5))["looked_up"] == 0
    assert stale_sent_lookup_run(now=now + timedelta(seconds=3 * HOUR + 10))["stopped"] == 1
    assert stale_sent_lookup_run(now=now + timedelta(days=30))["looked_up"] == 0  # bounded

    row = StatusLookup.objects.get(message=msg)
    assert row.tries == 3 and row.gave_up_at is not None and row.last_status == "sent"
    notes = MessageEvent.objects.filter(message=msg, kind=GAVE_UP)
    assert notes.count() == 1 and notes.get().details["source"] == "lookup"
    assert "after 3 lookups" in notes.get().details["note"]
    drain()
    msg.refresh_from_db()
    assert msg.status == Status.SENT


def test_provider_with_open_circuit_is_not_looked_up(lookups, tenant):  # noqa: F811
    lookups.config(callback_gap_ms=0)
    msg = stuck_sent(tenant, lookups)
    now = timezone.now()
    ProviderCircuit.objects.create(
        provider="twilio", account=lookups.account_sid, state="open", window_started_at=now, updated_at=now
    )
    counts = stale_sent_lookup_run()
    assert counts["skipped"] == 1 and counts["looked_up"] == 0
    assert not ReceiptEvent.objects.exists() and not StatusLookup.objects.filter(message=msg).exists()


def test_provider_that_does_not_answer_costs_no_lookup(lookups, tenant):  # noqa: F811
    msg = stuck_sent(tenant, lookups)
    lookups.config(outage="503")
    try:
        assert stale_sent_lookup_run()["looked_up"] == 0
    finally:
        lookups.config(outage="none")
    assert StatusLookup.objects.get(message=msg).tries == 0
