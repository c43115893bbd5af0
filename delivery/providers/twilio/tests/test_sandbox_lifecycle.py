"""The sandbox's message lifecycle, per-sender queue, ValidityPeriod, opt-outs and list order, read off a
fake clock (``SandboxState`` in process: exact instants, no waiting)."""

from __future__ import annotations

import re

import pytest

from delivery.providers.twilio.sandbox.lifecycle import TRIAL_PREFIX, count_segments, rfc2822, service_sender
from delivery.providers.twilio.sandbox.server import BadRequest, Refused, SandboxState

FROM = "+15005550006"
OTHER = "+15005550007"
SERVICE = "MG" + "a" * 32
T0 = 1_700_000_000.0  # a whole second


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def state(clock):
    return SandboxState(clock=clock, seed=1)


def configure(state: SandboxState, **changes) -> None:
    state.set_config(state.config.updated(changes))


def send(state, to="+15550700001", from_=FROM, body="hi", service="", validity=36000):
    return state.store(to, from_, body, service, "", validity_period=validity)


def view(state, m, at):
    return state.render(m, at)


def test_a_from_send_is_queued_then_sent_then_delivered(state):
    configure(state, queue_delay_ms=2000, callback_gap_ms=500)
    m = send(state)

    created = state.render(m, initial=True)
    assert (created["status"], created["date_sent"], created["price"]) == ("queued", None, None)
    assert (created["from"], created["num_segments"]) == (FROM, "1")

    queued = view(state, m, T0 + 1.999)
    assert (queued["status"], queued["date_sent"], queued["price"]) == ("queued", None, None)
    assert queued["date_updated"] == queued["date_created"] == rfc2822(int(T0))

    sent = view(state, m, T0 + 2)
    assert (sent["status"], sent["date_sent"], sent["price"]) == ("sent", rfc2822(int(T0 + 2)), "-0.00790")
    assert sent["date_updated"] == sent["date_sent"] and sent["error_code"] is None

    delivered = view(state, m, T0 + 2.5)
    assert delivered["status"] == "delivered" and delivered["date_sent"] == sent["date_sent"]
    assert delivered["error_code"] is None and delivered["price"] == "-0.00790"
    assert m.timeline() == [("sent", T0 + 2), ("delivered", T0 + 2.5)]


def test_a_service_send_is_accepted_without_from_until_a_sender_is_assigned(state):
    configure(state, service_assign_delay_ms=300, callback_gap_ms=100)
    m = send(state, from_="", service=SERVICE, body="x" * 161)  # two segments

    created = state.render(m, initial=True)
    assert (created["status"], created["from"], created["num_segments"]) == ("accepted", None, "0")
    assert created["messaging_service_sid"] == SERVICE
    before = view(state, m, T0 + 0.299)
    assert (before["status"], before["from"], before["num_segments"], before["date_sent"]) == (
        "accepted",
        None,
        "0",
        None,
    )
    assigned = view(state, m, T0 + 0.3)
    sender = service_sender(SERVICE)
    assert re.fullmatch(r"\+1500555\d{4}", sender)
    # queued and sent happen at the same instant here (no queue): the later status wins
    assert (assigned["status"], assigned["from"], assigned["num_segments"]) == ("sent", sender, "2")
    assert m.timeline() == [("queued", T0 + 0.3), ("sent", T0 + 0.3), ("delivered", pytest.approx(T0 + 0.4))]

    configure(state, queue_delay_ms=1000)
    m2 = send(state, from_="", service=SERVICE)
    assert view(state, m2, T0 + 0.3)["status"] == "queued"  # sender assigned, waiting in the queue
    assert m2.sender == sender  # one service, one sender
    assert service_sender(SERVICE) == sender  # deterministic, not random


def test_service_send_with_from_starts_queued_on_that_sender(state):
    m = send(state, from_=OTHER, service=SERVICE)
    created = state.render(m, initial=True)
    assert (created["status"], created["from"], created["num_segments"]) == ("queued", OTHER, "1")
    assert m.timeline()[0][0] == "sent"  # no "queued" callback: that was the initial status


def test_the_sender_queue_releases_segments_at_sender_rate(state, clock):
    configure(state, sender_rate=2)  # 2 segments/s: one segment every 0.5 s
    a = send(state)
    b = send(state, body="y" * 200)  # two segments: takes 1 s of the sender
    c = send(state)
    other = send(state, from_=OTHER)  # its own queue
    assert [m.release_at for m in (a, b, c, other)] == [T0, T0 + 0.5, T0 + 1.5, T0]
    assert view(state, c, T0 + 1.4)["status"] == "queued"
    assert view(state, c, T0 + 1.5)["status"] == "sent"

    clock.t = T0 + 10  # the queue drained: released at once
    assert send(state).release_at == T0 + 10


def test_queue_delay_is_the_least_time_in_the_queue(state):
    configure(state, queue_delay_ms=250, sender_rate=10)
    ms = [send(state) for _ in range(4)]
    assert [m.release_at for m in ms] == pytest.approx([T0 + 0.25, T0 + 0.35, T0 + 0.45, T0 + 0.55])


def test_a_full_sender_queue_refuses_a_from_send_with_21611(state, clock):
    configure(state, sender_rate=1, queue_max_seconds=3)
    stored = [send(state) for _ in range(4)]  # released at +0, +1, +2, +3 (3 s ahead: still fits)
    assert stored[-1].release_at == T0 + 3
    with pytest.raises(Refused) as exc:
        send(state)
    assert (exc.value.code, exc.value.outcome) == (21611, "queue_full")
    assert "exceeded the maximum number of queued messages" in exc.value.message
    assert len(state.all) == 4 and state.next_free[FROM] == T0 + 4  # nothing stored, no slot taken
    assert send(state, from_=OTHER).release_at == T0  # another sender is not affected
    clock.t = T0 + 1
    assert send(state).release_at == T0 + 4  # room again once the queue moved


def test_a_full_queue_fails_a_service_send_with_30001_after_accepting_it(state):
    configure(state, sender_rate=1, queue_max_seconds=2, service_assign_delay_ms=100)
    for _ in range(3):
        send(state, from_="", service=SERVICE)
    m = send(state, from_="", service=SERVICE)

    assert state.render(m, initial=True)["status"] == "accepted"
    assert view(state, m, T0 + 0.05)["status"] == "accepted"
    failed = view(state, m, T0 + 0.1)
    assert (failed["status"], failed["error_code"], failed["error_message"]) == (
        "failed",
        30001,
        "Queue overflow",
    )
    assert failed["date_sent"] is None and failed["price"] is None
    assert view(state, m, T0 + 3600)["status"] == "failed"  # never sent
    assert m.timeline() == [("failed", pytest.approx(T0 + 0.1))]


def test_validity_period_expires_a_message_still_queued_with_30036(state, clock):
    configure(state, sender_rate=1)
    ok = [send(state, validity=2) for _ in range(3)]  # released at +0, +1, +2: within 2 s
    late = send(state, validity=2)  # would be released at +3
    assert [m.final_status for m in ok] == ["delivered"] * 3

    assert view(state, late, T0 + 1.999)["status"] == "queued"
    expired = view(state, late, T0 + 2)
    assert (expired["status"], expired["error_code"], expired["error_message"]) == (
        "failed",
        30036,
        "Validity Period Expired",
    )
    assert expired["date_sent"] is None and expired["price"] is None
    assert late.timeline() == [("failed", T0 + 2)]  # a failed callback, no sent
    # the expired message took no sending time: the next one gets its slot
    clock.t = T0 + 1
    assert send(state, validity=2).release_at == T0 + 3


def test_a_service_send_that_expires_before_a_sender_is_assigned_never_gets_one(state):
    configure(state, service_assign_delay_ms=5000)
    m = send(state, from_="", service=SERVICE, validity=2)
    assert m.timeline() == [("failed", T0 + 2)]
    later = view(state, m, T0 + 60)
    assert (later["status"], later["error_code"], later["from"]) == ("failed", 30036, None)


def test_opted_out_recipients(state):
    configure(state, opted_out=["+15550700009"], service_assign_delay_ms=200)
    with pytest.raises(Refused) as exc:
        send(state, to="+15550700009")
    assert (exc.value.code, exc.value.message) == (21610, "Attempt to send to unsubscribed recipient")
    assert state.all == []

    m = send(state, to="+15550700009", from_="", service=SERVICE)
    assert state.render(m, initial=True)["status"] == "accepted"
    assert view(state, m, T0 + 0.1)["status"] == "accepted"
    failed = view(state, m, T0 + 0.2)
    assert (failed["status"], failed["error_code"], failed["date_sent"]) == ("failed", 21610, None)
    assert m.timeline() == [("failed", pytest.approx(T0 + 0.2))]
    assert send(state, to="+15550700008").final_status == "delivered"  # others are not affected


def test_shares_decide_undelivered_and_failed_finals(state):
    configure(state, callback_undelivered_share=1, callback_gap_ms=100)
    u = send(state)
    assert view(state, u, T0 + 0.1)["status"] == "undelivered"
    assert view(state, u, T0 + 0.1)["error_code"] == 30003
    assert [s for s, _ in u.timeline()] == ["sent", "undelivered"]

    configure(state, callback_undelivered_share=0, callback_failed_share=1)
    f = send(state)
    failed = view(state, f, T0)
    assert (failed["status"], failed["error_code"], failed["date_sent"], failed["price"]) == (
        "failed",
        30008,
        None,
        None,
    )
    assert f.timeline() == [("failed", T0)]


def test_trial_prefix_is_part_of_the_body(state):
    configure(state, trial_prefix=True)
    m = send(state, body="a" * 140)
    assert m.body == TRIAL_PREFIX + "a" * 140
    assert TRIAL_PREFIX == "Sent from your Twilio trial account - "
    assert m.num_segments == count_segments(TRIAL_PREFIX + "a" * 140) == 2  # the prefix counts


def _list(state, **filters):
    args = {"to": None, "from_": None, "lo": None, "hi": None, "page": 0, "page_size": 50, "token": None}
    args.update(filters)
    return state.query(**args)


def test_list_order_is_unsent_first_then_by_date_sent_newest_first(state, clock):
    configure(state, sender_rate=1)
    a = send(state, body="a")  # FROM: sent at +0
    b = send(state, body="b")  # FROM: +1
    c = send(state, body="c")  # FROM: +2
    d = send(state, from_=OTHER, body="d")  # OTHER: +0
    e = send(state, body="e")  # FROM: +3
    clock.t = T0 + 1.5
    items, _, _ = _list(state)
    # unsent (e, c: newest created first), then date_sent desc (b at +1), then seq desc within a second
    assert [m.body for m in items] == ["e", "c", "b", "d", "a"]
    assert [m.seq for m in (e, c, b, d, a)] == [4, 2, 1, 3, 0]

    # DateSent filters see only sent messages, on date_sent
    second = int(T0)
    assert [m.body for m in _list(state, lo=second + 1)[0]] == ["b"]
    assert [m.body for m in _list(state, hi=second)[0]] == ["d", "a"]
    assert [m.body for m in _list(state, lo=second - 86400, hi=second + 86400)[0]] == ["b", "d", "a"]


def test_from_filter_matches_the_current_from_only(state, clock):
    configure(state, service_assign_delay_ms=1000)
    sender = service_sender(SERVICE)
    m = send(state, from_="", service=SERVICE)
    assert _list(state, from_=sender)[0] == []  # accepted, from still null
    clock.t = T0 + 1
    assert _list(state, from_=sender)[0] == [m]
    assert _list(state, from_=sender, to=m.to)[0] == [m]
    assert _list(state, from_=FROM)[0] == []


def test_paging_is_a_snapshot_while_statuses_change_and_messages_arrive(state, clock):
    configure(state, sender_rate=1)
    ms = [send(state, body=str(i)) for i in range(9)]  # released one per second
    clock.t = T0 + 4.5
    seen, token = [], None
    while True:
        items, token, _ = _list(state, page_size=2, token=token)
        seen.extend(items)
        if token is None:
            break
        clock.t += 1  # between pages, more messages are sent (they would move to the sent group)
        send(state, body="new")  # and new ones arrive
    assert sorted(m.seq for m in seen) == [m.seq for m in ms]  # each once, none of the new ones
    # the order is the one of the first page's instant: unsent 8..5 newest first, then sent 4..0
    assert [m.body for m in seen] == ["8", "7", "6", "5", "4", "3", "2", "1", "0"]

    # a later listing starts a new snapshot
    clock.t = T0 + 100
    fresh, _, _ = _list(state, page_size=50)
    assert len(fresh) == len(state.all)


def test_previous_page_token_goes_back(state):
    for i in range(5):
        send(state, body=str(i))
    first, next_token, prev = _list(state, page_size=2)
    assert prev is None and [m.body for m in first] == ["4", "3"]
    second, _, prev = _list(state, page_size=2, token=next_token)
    assert [m.body for m in second] == ["2", "1"]
    back, _, _ = _list(state, page_size=2, token=prev)
    assert back == first
    with pytest.raises(BadRequest, match="Invalid PageToken"):
        _list(state, token="PAnot-a-token")


def test_stats_derive_statuses_and_per_sender_rates(state, clock):
    configure(state, sender_rate=2)
    for _ in range(4):
        send(state)  # released at +0, +0.5, +1, +1.5
    send(state, from_=OTHER)
    clock.t = T0 + 1.05  # delivered 100 ms after each release (the default gap)
    stats = state.stats()
    assert stats["by_status"] == {"delivered": 3, "sent": 1, "queued": 1}
    assert stats["senders"][FROM] == {
        "submitted": 4,
        "sent": 3,
        "max_submitted_per_second": 4,
        "max_sent_per_second": 2,
        "max_submitted_in_any_1s": 4,  # all four created at T0
        "max_segments_in_any_1s": 4,
    }
    assert stats["senders"][OTHER]["sent"] == 1
