"""The release gate in-process, on a simulated clock (``now=`` passed to the release step): messages leave
at their senders' and the account's rates, wait as ``paced`` with an expected send time and one timeline
entry, stay cancellable, share a constrained account fairly between tenants and priorities, slow down on
throttling and recover, and wait out an open circuit without being charged."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from delivery.flow import buckets, circuit, pacing
from delivery.models import AccountCapacity, RateBucket, SenderCapacity
from delivery.providers import get_adapter
from scheduling.dispatch import release
from scheduling.lifecycle import transitions
from scheduling.messages import service as services
from scheduling.models import Message, MessageEvent, Status
from smsgw.models import Tenant
from tests.factories import message, messages_bulk, tenant_with_key

pytestmark = pytest.mark.django_db
SENDER = "+14155550100"


@pytest.fixture
def adapter(settings):
    settings.TWILIO_ACCOUNT_SID = "AC" + "1" * 32
    settings.PACING_HEADROOM = 1.0
    settings.PACING_RELEASE_AHEAD_SECONDS = AHEAD
    settings.PACING_DISPATCH_SECONDS = DISPATCH
    get_adapter.cache_clear()
    yield get_adapter()
    get_adapter.cache_clear()


AHEAD, DISPATCH = 1.0, 0.35
CLOCK: dict[str, float] = {}


@pytest.fixture
def slots(monkeypatch) -> dict[int, float]:
    """Each released message's submission instant (its slot; one without a slot goes at the pass's own
    time), captured where the release step hands its batches to the broker."""
    out: dict[int, float] = {}

    def capture(priority, ids, *, provider, not_before=None):
        for mid in ids:
            out[mid] = (not_before or {}).get(mid) or CLOCK["now"]

    original = release.due_release

    def due_release(*, now=None, limit=None):
        CLOCK["now"] = (now or timezone.now()).timestamp()
        return original(now=now, limit=limit)

    monkeypatch.setattr(release, "publish_after_commit", capture)
    monkeypatch.setattr(release, "due_release", due_release)
    return out


def rate(adapter, sender: str, per_second: float) -> None:
    SenderCapacity.objects.create(
        provider=adapter.name, account=adapter.account, sender=sender, segments_per_second=per_second
    )


def statuses(pks) -> dict[str, int]:
    out: dict[str, int] = {}
    for status in Message.objects.filter(pk__in=pks).values_list("status", flat=True):
        out[status] = out.get(status, 0) + 1
    return out


def due_before(msg: Message, t0, seconds: float = 1.0) -> Message:
    """Due ``seconds`` before the simulated ``t0``, however long the machine took to get here (a message
    made "due 1 s ago" on the real clock is not due at ``t0`` on a loaded machine)."""
    due = t0 - timedelta(seconds=seconds)
    Message.objects.filter(pk=msg.pk).update(due_at=due, run_after=due, expires_at=due + timedelta(hours=1))
    msg.refresh_from_db()
    return msg


def run(seconds: float, start, step: float = 0.05) -> int:
    """Release passes every ``step`` simulated seconds for ``seconds``; returns how many were queued."""
    queued = 0
    for i in range(int(seconds / step) + 1):
        queued += sum(release.due_release(now=start + timedelta(seconds=i * step)).queued.values())
    return queued


def max_in_any_window(times: list[float], window: float = 1.0) -> int:
    times = sorted(times)
    best = lo = 0
    for hi, t in enumerate(times):
        while times[lo] <= t - window + 1e-6:  # (slots are float sums of intervals)
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def test_a_sender_releases_at_its_rate_and_the_rest_wait_paced_with_an_expected_time(adapter, api, slots):
    rate(adapter, SENDER, 10)
    tenant = api.tenant
    t0 = timezone.now()
    pks = messages_bulk(tenant, 50, due_at=t0 - timedelta(seconds=1))
    first = release.due_release(now=t0)
    # The first goes at once (the sender was idle), so it leaves when a worker has it, about DISPATCH
    # from now; the others of the next second get slots 0.1 s apart after that; the rest wait in our
    # store.
    assert sum(first.queued.values()) == 7 and first.paced == 43
    expected_slots = [0.0] + [DISPATCH + (i + 1) / 10 for i in range(6)]
    assert sorted(t - t0.timestamp() for t in slots.values()) == pytest.approx(expected_slots, abs=1e-3)
    waiting = list(Message.objects.filter(pk__in=pks, status=Status.SCHEDULED).order_by("run_after"))
    assert all(m.reason_code == "paced" for m in waiting)
    expected = [m.run_after.timestamp() - t0.timestamp() for m in waiting]
    assert expected == pytest.approx([1.05 + i / 10 for i in range(43)], abs=1e-3), (
        "each its own slot, in order"
    )
    event = MessageEvent.objects.get(message=waiting[10], kind="paced")
    assert event.details["limited_by"] == f"sender {SENDER}" and event.details["segments_per_second"] == 10
    assert event.details["expected_send_at"] == waiting[10].run_after.isoformat()
    # The API shows it: still scheduled (cancellable), with the expected send time and the reason.
    body = api.get(f"/v1/messages/{waiting[10].public_id}").json()
    assert body["status"] == "scheduled" and body["reason_code"] == "paced"
    assert body["expected_send_at"] == waiting[10].run_after.isoformat().replace("+00:00", "Z")

    # Over the next 5 simulated seconds the rest are released for their slots (at most 10 in any second),
    # each at its expected time; waiting longer writes no new entry.
    promised = {m.pk: m.run_after.timestamp() for m in waiting}
    queued = run(5.0, t0 + timedelta(seconds=0.05))
    assert queued == 43
    assert all(slots[pk] == pytest.approx(at, abs=1e-3) for pk, at in promised.items()), "promises kept"
    assert max_in_any_window(list(slots.values())) == 10
    assert MessageEvent.objects.filter(message_id__in=pks, kind="paced").count() == 43


def test_a_paced_message_can_be_cancelled_and_is_never_released(adapter, api, slots):
    rate(adapter, SENDER, 1)
    t0 = timezone.now()
    pks = messages_bulk(api.tenant, 5, due_at=t0 - timedelta(seconds=1))
    release.due_release(now=t0)
    victim = Message.objects.filter(pk__in=pks, reason_code="paced").order_by("run_after").first()
    result = services.message_cancel(tenant=api.tenant, public_id=victim.public_id, actor="test")
    assert result.status == Status.CANCELLED
    run(10.0, t0 + timedelta(seconds=0.5), step=0.5)
    victim.refresh_from_db()
    assert victim.status == Status.CANCELLED and victim.pk not in slots
    assert statuses(pks) == {Status.QUEUED: 4, Status.CANCELLED: 1}


def test_the_account_cap_applies_across_senders(adapter, api, slots):
    AccountCapacity.objects.create(provider=adapter.name, account=adapter.account, segments_per_second=20)
    t0 = timezone.now()
    pks = messages_bulk(api.tenant, 100, due_at=t0 - timedelta(seconds=1))
    Message.objects.filter(pk__in=pks[::2]).update(from_number="+14155550199")  # two senders, both unlimited
    run(3.0, t0)
    within = [t for t in slots.values() if t < t0.timestamp() + 3 - 1e-6]
    # 20/s for 3 s over both senders: the first at once, the rest from the dispatch origin on. The
    # account is a budget, not a per-sender spacing: at most one more than its rate in any second.
    assert abs(len(within) - (1 + round((3 - DISPATCH) * 20))) <= 1
    assert max_in_any_window(list(slots.values())) <= 21


def test_multi_segment_messages_cost_their_segments(adapter, api, slots):
    rate(adapter, SENDER, 10)
    t0 = timezone.now()
    pks = messages_bulk(api.tenant, 30, due_at=t0 - timedelta(seconds=1))
    Message.objects.filter(pk__in=pks).update(segments=3)
    run(3.0, t0)
    times = sorted(slots.values())
    # The first goes at once and leaves when a worker has it (about DISPATCH): 30 segments in the 3 s
    # from then, ten 3-segment SMS, each 0.3 s after the one before.
    times[0] += DISPATCH
    assert len([t for t in times if t < times[0] + 3]) == 10
    assert min(b - a for a, b in itertools.pairwise(times)) == pytest.approx(0.3, abs=1e-3)


def test_a_tenants_backlog_does_not_delay_another_tenant(adapter, settings):
    AccountCapacity.objects.create(provider=adapter.name, account=adapter.account, segments_per_second=50)
    big, _ = tenant_with_key("big")
    small, _ = tenant_with_key("small")
    t0 = timezone.now()
    backlog = messages_bulk(big, 400, due_at=t0 - timedelta(seconds=60))  # older than anything else
    others = [due_before(message(small), t0) for _ in range(5)]
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


def test_a_tenant_send_rate_limits_that_tenant_only(adapter, api, slots):
    Tenant.objects.filter(pk=api.tenant.pk).update(send_rate_per_second=5)
    other, _ = tenant_with_key("other")
    t0 = timezone.now()
    limited = messages_bulk(api.tenant, 50, due_at=t0 - timedelta(seconds=1))
    free = [due_before(message(other), t0).pk for _ in range(50)]
    run(2.0, t0)
    assert len([pk for pk in limited if pk in slots and slots[pk] < t0.timestamp() + 2]) == 10
    times = sorted(slots[pk] - t0.timestamp() for pk in limited if pk in slots)
    assert max_in_any_window(times) <= 6, times  # a budget: its rate, plus one, in any second
    assert Message.objects.filter(pk__in=free, status=Status.QUEUED).count() == 50
    assert all(slots[pk] <= t0.timestamp() + 0.01 for pk in free), "the other tenant goes at once"


def test_throttling_lowers_the_rate_for_everyone_and_it_recovers(adapter, api, settings):
    rate(adapter, SENDER, 10)
    settings.AIMD_DECREASE = 0.5
    settings.AIMD_INCREASE_PER_SECOND = 0.1
    t0 = timezone.now()
    messages_bulk(api.tenant, 100, due_at=t0 - timedelta(seconds=1))
    release.due_release(now=t0)  # creates the sender's bucket; most wait
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


def test_a_disabled_tenant_sends_nothing_and_resumes_when_enabled(adapter, api, settings):
    Tenant.objects.filter(pk=api.tenant.pk).update(is_active=False)
    t0 = timezone.now()
    pks = messages_bulk(api.tenant, 10, due_at=t0 - timedelta(seconds=1))
    release.due_release(now=t0)
    assert statuses(pks) == {Status.SCHEDULED: 10}
    assert set(Message.objects.filter(pk__in=pks).values_list("reason_code", flat=True)) == {
        "tenant_disabled"
    }
    Tenant.objects.filter(pk=api.tenant.pk).update(is_active=True)
    release.due_release(now=t0 + timedelta(seconds=settings.DISABLED_TENANT_RECHECK_SECONDS + 1))
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


def test_an_outage_trips_the_circuit_after_a_streak_not_after_failures_outnumber_earlier_successes(
    adapter, settings
):
    settings.CIRCUIT_STREAK_FAILURES = 20
    # A busy account: thousands of answers in the window, then the provider starts failing everything.
    circuit.circuit_report(provider=adapter.name, account=adapter.account, ok=5000, failed=1, error="503")
    for _ in range(3):
        state = circuit.circuit_report(
            provider=adapter.name, account=adapter.account, ok=0, failed=6, error="503"
        )
        assert not state.is_open, "a few failures are not an outage"
    state = circuit.circuit_report(
        provider=adapter.name, account=adapter.account, ok=0, failed=2, error="503"
    )
    assert state.is_open, "20 failures in a row are, whatever the window's successes"
    assert circuit.seen_open(adapter.name, adapter.account), "this process knows at once"
    # An answer between failures breaks the streak.
    circuit.circuit_close(adapter.name, adapter.account)
    circuit.circuit_report(provider=adapter.name, account=adapter.account, ok=100, failed=1, error="503")
    circuit.circuit_report(provider=adapter.name, account=adapter.account, ok=0, failed=18, error="503")
    assert not circuit.circuit_report(provider=adapter.name, account=adapter.account, ok=1, failed=1).is_open


def test_after_a_throttle_the_rate_climbs_fast_to_just_below_where_it_was_throttled_then_slowly(
    adapter, api, settings
):
    rate(adapter, SENDER, 20)
    settings.AIMD_DECREASE = 0.5
    settings.AIMD_INCREASE_PER_SECOND = 0.05  # 1/s of the configured 20
    t0 = timezone.now()
    messages_bulk(api.tenant, 500, due_at=t0 - timedelta(seconds=1))
    release.due_release(now=t0)
    key = pacing.bucket_key(adapter.name, adapter.account, "sender", SENDER)
    RateBucket.objects.filter(key=key).update(rate_effective=10)
    pacing.throttle_signal(
        provider=adapter.name, account=adapter.account, scope="sender", value=SENDER, retry_after=None
    )
    bucket = RateBucket.objects.get(key=key)
    assert (bucket.rate_ceiling, bucket.rate_effective) == (10, 5)
    knee = buckets.AIMD_KNEE * 10  # 9: reached after 4 s at 1/s ...
    release.due_release(now=bucket.updated_at + timedelta(seconds=4))
    assert RateBucket.objects.get(key=key).rate_effective == pytest.approx(knee, abs=0.05)
    # ... then a tenth of that speed: 10 s later it is 1 above the knee, not at the configured 20.
    updated = RateBucket.objects.get(key=key).updated_at
    release.due_release(now=updated + timedelta(seconds=10))
    assert RateBucket.objects.get(key=key).rate_effective == pytest.approx(knee + 1.0, abs=0.05)


def test_transactional_is_not_queued_behind_bulk_already_released_on_the_account(adapter, api, slots):
    AccountCapacity.objects.create(provider=adapter.name, account=adapter.account, segments_per_second=100)
    t0 = timezone.now()
    bulk = messages_bulk(api.tenant, 300, due_at=t0 - timedelta(seconds=1), priority="bulk")
    release.due_release(now=t0)  # bulk takes the account's budget for the whole release window
    assert max(slots[pk] for pk in bulk if pk in slots) > t0.timestamp() + AHEAD - 0.05
    tx = due_before(message(api.tenant), t0)  # transactional, due now
    release.due_release(now=t0 + timedelta(seconds=0.1))
    assert slots[tx.pk] <= t0.timestamp() + 0.1 + DISPATCH + 0.01, "not behind the released bulk"


def sender_bucket(adapter, sender: str, per_second: float, tat) -> RateBucket:
    """A sender's bucket as the release gate leaves it: slots released up to ``tat``."""
    return RateBucket.objects.create(
        key=pacing.bucket_key(adapter.name, adapter.account, "sender", sender),
        kind="sender",
        rate_configured=per_second,
        rate_effective=per_second,
        tat=tat,
        projected_until=tat,
        updated_at=timezone.now(),
    )


def test_late_messages_take_new_slots_after_everything_released_for_their_sender(adapter):
    """A batch that reached its worker after its slots: its messages go after the sender's slots already
    released to other workers, at the sender's spacing, and the shared tat moves past them (the sender's
    next releases come after them instead of going out with them)."""
    released_until = timezone.now() + timedelta(seconds=0.5)
    bucket = sender_bucket(adapter, SENDER, 10.0, released_until)
    other = sender_bucket(adapter, "+14155550199", 10.0, released_until)
    late = [(1, SENDER, 1), (2, SENDER, 2), (3, SENDER, 1)]  # (id, sender, segments), in slot order
    slots = pacing.late_reslot(adapter.name, adapter.account, late, horizon=2.0)
    assert slots[1] >= released_until.timestamp() - 1e-6, "after what was already released"
    assert slots[2] - slots[1] == pytest.approx(0.1), "the sender's interval (10/s)"
    assert slots[3] - slots[2] == pytest.approx(0.2), "a 2-segment message takes two intervals"
    bucket.refresh_from_db()
    assert bucket.tat.timestamp() == pytest.approx(slots[3] + 0.1, abs=1e-5), "the next slot is after them"
    other.refresh_from_db()
    assert other.tat == released_until, "another sender's bucket is untouched"


def test_a_late_message_of_a_sender_whose_bucket_is_idle_starts_now(adapter):
    sender_bucket(adapter, SENDER, 10.0, timezone.now() - timedelta(seconds=30))
    before = timezone.now().timestamp()
    slots = pacing.late_reslot(adapter.name, adapter.account, [(1, SENDER, 1), (2, SENDER, 1)], horizon=2.0)
    assert before - 1e-6 <= slots[1] <= timezone.now().timestamp()
    assert slots[2] - slots[1] == pytest.approx(0.1)


def test_a_late_message_asked_for_from_a_busy_loop_gets_a_slot_it_can_still_reach(adapter):
    """``lead``: the answer has to reach an event loop that is running late, so the new slot is not
    "now" (already past on arrival), but that far ahead."""
    sender_bucket(adapter, SENDER, 10.0, timezone.now() - timedelta(seconds=30))
    before = timezone.now().timestamp()
    slots = pacing.late_reslot(adapter.name, adapter.account, [(1, SENDER, 1)], horizon=2.0, lead=0.2)
    assert before + 0.2 - 1e-6 <= slots[1] <= timezone.now().timestamp() + 0.2


def test_a_sender_without_a_bucket_is_left_to_the_caller(adapter):
    assert pacing.late_reslot(adapter.name, adapter.account, [(1, SENDER, 1)], horizon=2.0) == {}


def test_a_sender_whose_line_ends_beyond_the_horizon_is_left_out_not_given_released_slots(adapter):
    """Slots are released up to 5 s ahead for this sender: with a 2-s horizon the late messages are left
    to the caller. Cut to the horizon, they would take slots 2 s ahead that other workers already hold."""
    released_until = timezone.now() + timedelta(seconds=5)
    bucket = sender_bucket(adapter, SENDER, 10.0, released_until)
    other = sender_bucket(adapter, "+14155550199", 10.0, timezone.now())
    late = [(1, SENDER, 1), (2, "+14155550199", 1)]
    slots = pacing.late_reslot(adapter.name, adapter.account, late, horizon=2.0)
    assert 1 not in slots and 2 in slots
    bucket.refresh_from_db()
    assert bucket.tat == released_until, "the long line is untouched"
    other.refresh_from_db()
    assert other.tat.timestamp() == pytest.approx(slots[2] + 0.1, abs=1e-5)


@pytest.mark.django_db(transaction=True)
def test_two_late_batches_of_one_sender_at_once_get_disjoint_slots(adapter):
    """Two workers with late batches of the same sender: the second waits for the first's row lock and
    takes its slots after the first's, never the same ones."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL")
    released_until = timezone.now() + timedelta(seconds=0.3)
    bucket = sender_bucket(adapter, SENDER, 20.0, released_until)
    holding, commit = threading.Event(), threading.Event()
    got: dict[str, dict[int, float]] = {}

    def first():
        with transaction.atomic():  # the row stays locked until this commits
            got["first"] = pacing.late_reslot(
                adapter.name, adapter.account, [(i, SENDER, 1) for i in range(1, 6)], horizon=2.0
            )
            holding.set()
            commit.wait(10)
        connection.close()

    def second():
        holding.wait(10)
        got["second"] = pacing.late_reslot(
            adapter.name, adapter.account, [(i, SENDER, 1) for i in range(6, 11)], horizon=2.0
        )
        connection.close()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    try:
        assert holding.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not _waiting_on_a_lock():
            time.sleep(0.01)
        assert _waiting_on_a_lock(), "the second batch waits for the first's lock"
    finally:
        commit.set()
        for t in threads:
            t.join(10)
    slots = sorted([*got["first"].values(), *got["second"].values()])
    assert len(slots) == 10
    assert min(got["second"].values()) >= max(got["first"].values()) + 0.05 - 1e-6
    gaps = [b - a for a, b in itertools.pairwise(slots)]
    assert min(gaps) == pytest.approx(0.05), "disjoint, at the sender's spacing"
    bucket.refresh_from_db()
    assert bucket.tat.timestamp() == pytest.approx(slots[-1] + 0.05, abs=1e-5)


def _waiting_on_a_lock() -> bool:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        return cur.fetchone()[0] > 0
