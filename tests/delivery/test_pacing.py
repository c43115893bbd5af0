"""The release gate in-process, on a simulated clock (``now=`` passed to the release step): messages leave
at their senders' and the account's rates, wait as ``paced`` with an expected send time and one timeline
entry, stay cancellable, share a constrained account fairly between tenants and priorities, slow down on
throttling and recover, and wait out an open circuit without being charged."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from delivery import circuit, pacing
from delivery.models import AccountCapacity, RateBucket, SenderCapacity
from delivery.providers import get_adapter
from scheduling import release, services, transitions
from scheduling.models import Message, MessageEvent, Status
from smsgw.models import Tenant
from tests.factories import message, messages_bulk, tenant_with_key

pytestmark = pytest.mark.django_db
SENDER = "+14155550100"


@pytest.fixture
def adapter(settings):
    settings.TWILIO_ACCOUNT_SID = "AC" + "1" * 32
    settings.PACING_HEADROOM = 1.0
    settings.PACING_BURST_SECONDS = 0.2
    get_adapter.cache_clear()
    yield get_adapter()
    get_adapter.cache_clear()


def rate(adapter, sender: str, per_second: float) -> None:
    SenderCapacity.objects.create(
        provider=adapter.name, account=adapter.account, sender=sender, segments_per_second=per_second
    )


def statuses(pks) -> dict[str, int]:
    out: dict[str, int] = {}
    for status in Message.objects.filter(pk__in=pks).values_list("status", flat=True):
        out[status] = out.get(status, 0) + 1
    return out


def run(seconds: float, start, step: float = 0.05) -> int:
    """Release passes every ``step`` simulated seconds for ``seconds``; returns how many were queued."""
    queued = 0
    for i in range(int(seconds / step) + 1):
        queued += sum(release.due_release(now=start + timedelta(seconds=i * step)).queued.values())
    return queued


def test_a_sender_releases_at_its_rate_and_the_rest_wait_paced_with_an_expected_time(adapter, api):
    rate(adapter, SENDER, 10)
    tenant = api.tenant
    t0 = timezone.now()
    pks = messages_bulk(tenant, 50, due_at=t0 - timedelta(seconds=1))
    first = release.due_release(now=t0)
    assert sum(first.queued.values()) == 3  # one, plus the idle allowance (0.2 s at 10/s), no more
    assert first.paced == 47
    waiting = list(Message.objects.filter(pk__in=pks, status=Status.SCHEDULED).order_by("run_after"))
    assert all(m.reason_code == "paced" for m in waiting)
    slots = [m.run_after for m in waiting]
    assert slots == sorted(slots) and len(set(slots)) == 47, "each waits for its own slot"
    assert (slots[-1] - t0).total_seconds() == pytest.approx(47 / 10, abs=0.25)
    event = MessageEvent.objects.get(message=waiting[10], kind="paced")
    assert event.details["limited_by"] == f"sender {SENDER}" and event.details["segments_per_second"] == 10
    # The API shows it: still scheduled (cancellable), with the expected send time and the reason.
    body = api.get(f"/v1/messages/{waiting[10].public_id}").json()
    assert body["status"] == "scheduled" and body["reason_code"] == "paced"
    assert body["expected_send_at"] == waiting[10].run_after.isoformat().replace("+00:00", "Z")

    # Over the next 5 simulated seconds they leave at 10/s, and waiting longer writes no new entry.
    queued = run(5.0, t0 + timedelta(seconds=0.05))
    assert 46 <= queued <= 47
    assert MessageEvent.objects.filter(message_id__in=pks, kind="paced").count() == 47


def test_a_paced_message_can_be_cancelled_and_is_never_released(adapter, api):
    rate(adapter, SENDER, 1)
    t0 = timezone.now()
    pks = messages_bulk(api.tenant, 5, due_at=t0 - timedelta(seconds=1))
    release.due_release(now=t0)
    victim = Message.objects.filter(pk__in=pks, reason_code="paced").order_by("run_after").first()
    result = services.message_cancel(tenant=api.tenant, public_id=victim.public_id, actor="test")
    assert result.status == Status.CANCELLED
    run(10.0, t0 + timedelta(seconds=0.5), step=0.5)
    victim.refresh_from_db()
    assert victim.status == Status.CANCELLED
    assert statuses(pks) == {Status.QUEUED: 4, Status.CANCELLED: 1}


def test_the_account_cap_applies_across_senders(adapter, api):
    AccountCapacity.objects.create(provider=adapter.name, account=adapter.account, segments_per_second=20)
    t0 = timezone.now()
    pks = messages_bulk(api.tenant, 100, due_at=t0 - timedelta(seconds=1))
    Message.objects.filter(pk__in=pks[::2]).update(from_number="+14155550199")  # two senders, both unlimited
    queued = run(2.0, t0)
    assert 40 <= queued <= 46  # 20/s for 2 s, plus the burst allowance


def test_multi_segment_messages_cost_their_segments(adapter, api):
    rate(adapter, SENDER, 10)
    t0 = timezone.now()
    pks = messages_bulk(api.tenant, 30, due_at=t0 - timedelta(seconds=1))
    Message.objects.filter(pk__in=pks).update(segments=3)
    queued = run(3.0, t0)
    assert 9 <= queued <= 11  # 30 segments in 3 s: ten 3-segment messages


def test_a_tenants_backlog_does_not_delay_another_tenant(adapter, settings):
    AccountCapacity.objects.create(provider=adapter.name, account=adapter.account, segments_per_second=50)
    big, _ = tenant_with_key("big")
    small, _ = tenant_with_key("small")
    t0 = timezone.now()
    backlog = messages_bulk(big, 400, due_at=t0 - timedelta(seconds=60))  # older than anything else
    others = [message(small, due_in=-1) for _ in range(5)]
    release.due_release(now=t0, limit=100)  # a backlog: the pass still reaches the other tenant
    waiting = Message.objects.filter(pk__in=[m.pk for m in others], status=Status.SCHEDULED)
    expected = list(waiting.values_list("run_after", flat=True))
    assert not expected or max(expected) <= t0 + timedelta(seconds=0.5), (
        "its own line, not behind the backlog"
    )
    run(0.5, t0 + timedelta(seconds=0.05))
    assert statuses([m.pk for m in others]) == {Status.QUEUED: 5}, "within half a second, not behind 400"
    assert Message.objects.filter(pk__in=backlog, status=Status.QUEUED).count() > 0


def test_transactional_goes_first_but_bulk_keeps_its_share(adapter, settings, api):
    AccountCapacity.objects.create(provider=adapter.name, account=adapter.account, segments_per_second=40)
    settings.PACING_BULK_MIN_SHARE = 0.25
    t0 = timezone.now()
    tx = messages_bulk(api.tenant, 200, due_at=t0 - timedelta(seconds=1), priority="transactional")
    bulk = [
        m
        for m in messages_bulk(api.tenant, 200, due_at=t0 - timedelta(seconds=1), priority="bulk")
        if m not in tx
    ]
    run(2.0, t0)
    sent_tx = Message.objects.filter(pk__in=tx, status=Status.QUEUED).count()
    sent_bulk = Message.objects.filter(pk__in=bulk, status=Status.QUEUED).count()
    assert sent_tx > sent_bulk > 0
    assert sent_bulk >= 0.15 * (sent_tx + sent_bulk)


def test_a_tenant_send_rate_limits_that_tenant_only(adapter, api):
    Tenant.objects.filter(pk=api.tenant.pk).update(send_rate_per_second=5)
    other, _ = tenant_with_key("other")
    t0 = timezone.now()
    limited = messages_bulk(api.tenant, 50, due_at=t0 - timedelta(seconds=1))
    free = [m.pk for m in (message(other, due_in=-1) for _ in range(50))]
    run(2.0, t0)
    assert 9 <= Message.objects.filter(pk__in=limited, status=Status.QUEUED).count() <= 12
    assert Message.objects.filter(pk__in=free, status=Status.QUEUED).count() == 50


def test_throttling_lowers_the_rate_for_everyone_and_it_recovers(adapter, api, settings):
    rate(adapter, SENDER, 10)
    settings.AIMD_DECREASE = 0.5
    settings.AIMD_INCREASE_PER_SECOND = 0.1
    t0 = timezone.now()
    messages_bulk(api.tenant, 5, due_at=t0 - timedelta(seconds=1))
    release.due_release(now=t0)  # creates the sender's bucket
    key = pacing.bucket_key(adapter.name, adapter.account, "sender", SENDER)
    pacing.throttle_signal(
        provider=adapter.name, account=adapter.account, scope="sender", value=SENDER, retry_after=None
    )
    pacing.throttle_signal(
        provider=adapter.name, account=adapter.account, scope="sender", value=SENDER, retry_after=None
    )
    bucket = RateBucket.objects.get(key=key)
    assert bucket.rate_effective == 5 and bucket.throttles == 1, "one burst of refusals is one signal"
    # Retry-After blocks the sender entirely until then.
    pacing.throttle_signal(
        provider=adapter.name, account=adapter.account, scope="sender", value=SENDER, retry_after=30
    )
    assert RateBucket.objects.get(key=key).blocked_until >= timezone.now() + timedelta(seconds=29)
    RateBucket.objects.filter(key=key).update(blocked_until=None)
    # Additive increase: +1/s (10% of 10) per second, never above the configured rate.
    release.due_release(now=bucket.updated_at + timedelta(seconds=3))
    assert RateBucket.objects.get(key=key).rate_effective == pytest.approx(8, abs=0.3)
    messages_bulk(api.tenant, 5, due_at=t0)  # the gate recomputes the rate when it has work
    release.due_release(now=bucket.updated_at + timedelta(seconds=30))
    assert RateBucket.objects.get(key=key).rate_effective == 10


def test_an_open_circuit_parks_everything_probes_with_one_message_and_releases_on_close(
    adapter, api, settings
):
    settings.CIRCUIT_MIN_FAILURES = 3
    t0 = timezone.now()
    state = circuit.circuit_report(
        provider=adapter.name, account=adapter.account, ok=1, failed=5, error="503"
    )
    assert state.is_open
    pks = messages_bulk(api.tenant, 20, due_at=t0 - timedelta(seconds=1))
    report = release.due_release(now=t0)
    assert report.unavailable == 20 and not report.queued
    waiting = Message.objects.filter(pk__in=pks, reason_code="provider_unavailable")
    assert waiting.count() == 20 and MessageEvent.objects.filter(kind="provider_unavailable").count() == 20
    # One probe per interval: exactly one waiting message is released, marked as the probe.
    probe_at = t0 + timedelta(seconds=settings.CIRCUIT_PROBE_SECONDS + 0.01)
    assert circuit.circuit_tick(probe_at) == "message"
    assert circuit.circuit_tick(probe_at) == "none"
    probe = Message.objects.get(pk__in=pks, status=Status.QUEUED)
    assert probe.reason_code == "circuit_probe"
    # The probe's answer closes the circuit; everything that waited is due at once, charged nothing.
    circuit.circuit_report(provider=adapter.name, account=adapter.account, ok=1, failed=0, probe_ok=True)
    assert not circuit.circuit_state(adapter.name, adapter.account).is_open
    assert (
        Message.objects.filter(pk__in=pks, status=Status.SCHEDULED, run_after__gt=timezone.now()).count() == 0
    )
    report = release.due_release(now=timezone.now())
    assert sum(report.queued.values()) == 19
    assert set(Message.objects.filter(pk__in=pks).values_list("attempt_count", flat=True)) == {0}


def test_a_disabled_tenant_sends_nothing_and_resumes_when_enabled(adapter, api):
    Tenant.objects.filter(pk=api.tenant.pk).update(is_active=False)
    t0 = timezone.now()
    pks = messages_bulk(api.tenant, 10, due_at=t0 - timedelta(seconds=1))
    release.due_release(now=t0)
    assert statuses(pks) == {Status.SCHEDULED: 10}
    assert set(Message.objects.filter(pk__in=pks).values_list("reason_code", flat=True)) == {
        "tenant_disabled"
    }
    Tenant.objects.filter(pk=api.tenant.pk).update(is_active=True)
    release.due_release(now=t0 + timedelta(seconds=release.DISABLED_WAIT_SECONDS + 1))
    assert statuses(pks) == {Status.QUEUED: 10}


def test_a_retry_that_falls_due_inside_quiet_hours_waits_for_the_window_end(adapter, api):
    from datetime import UTC, datetime, time

    msg = message(api.tenant, due_in=-1)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    night = datetime(2027, 1, 15, 22, 30, tzinfo=UTC)
    Message.objects.filter(pk=msg.pk).update(
        run_after=night - timedelta(seconds=1),
        expires_at=night + timedelta(days=1),
        quiet_start=time(21, 0),
        quiet_end=time(8, 0),
        quiet_timezone="UTC",
    )
    report = release.due_release(now=night)
    msg.refresh_from_db()
    assert report.quiet_deferred == 1 and msg.status == Status.QUEUED
    assert msg.run_after == datetime(2027, 1, 16, 8, 0, tzinfo=UTC) and msg.reason_code == "quiet_hours"
    assert msg.events.get(kind="quiet_hours_deferred").details["stage"] == "retry"
