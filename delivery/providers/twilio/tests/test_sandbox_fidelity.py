"""Twilio behaviours of the sandbox over HTTP, through the twilio SDK: the lifecycle in real time,
ValidityPeriod, queue overflow (21611 / 30001), opt-outs (21610), the concurrency cap (20429), the
credentials switch (20003) and the Account resource, the trial prefix, stats and the debug endpoint."""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest
from twilio.base.exceptions import TwilioRestException

from delivery.providers.twilio.tests.test_sandbox_callbacks import Receiver, wait_callbacks, wait_for

FROM = "+15005550006"
SERVICE = "MG" + "c" * 32


@pytest.fixture
def receiver():
    r = Receiver()
    r.thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture
def sb(sandbox):
    sandbox.reset()
    sandbox.config(callback_delay_ms=0, callback_gap_ms=0)
    yield sandbox
    sandbox.reset()


def raw_request(sandbox, method: str, path: str, form: dict | None = None) -> tuple[int, dict, dict]:
    """(status, JSON body, headers) of a Twilio API call with the sandbox's credentials."""
    credentials = base64.b64encode(f"{sandbox.account_sid}:{sandbox.auth_token}".encode()).decode()
    data = None if form is None else urllib.parse.urlencode(form).encode()
    request = urllib.request.Request(
        f"{sandbox.base_url}/2010-04-01/Accounts/{sandbox.account_sid}{path}",
        data=data,
        method=method,
        headers={"Authorization": f"Basic {credentials}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), dict(exc.headers)


def test_statuses_move_with_time_and_date_sent_is_set_when_sent(sb):
    sb.config(queue_delay_ms=400, callback_gap_ms=300)
    client = sb.client()
    created = client.messages.create(to="+15550800001", from_=FROM, body="x")
    assert (created.status, created.date_sent, created.price) == ("queued", None, None)

    seen = []

    def delivered():
        m = client.messages(created.sid).fetch()
        if not seen or seen[-1][0] != m.status:
            seen.append((m.status, m.date_sent, m.price))
        return m.status == "delivered"

    wait_for(delivered, what="delivered")
    statuses = [s for s, _, _ in seen]
    assert statuses[-1] == "delivered" and set(statuses) <= {"queued", "sent", "delivered"}
    assert statuses == sorted(statuses, key=["queued", "sent", "delivered"].index)  # never backwards
    for status, date_sent, price in seen:
        assert (date_sent is None) == (status == "queued") and (price is None) == (status == "queued")
    info = sb.message_info(created.sid)
    assert info["release_at"] == pytest.approx(info["created_at"] + 0.4)
    assert info["final_at"] == pytest.approx(info["release_at"] + 0.3)


def test_service_send_callbacks_follow_the_sender_assignment(sb, receiver):
    sb.config(service_assign_delay_ms=300, queue_delay_ms=200)
    client = sb.client()
    created = client.messages.create(
        to="+15550800002", messaging_service_sid=SERVICE, body="x", status_callback=receiver.url()
    )
    assert (created.status, created.from_, created.num_segments) == ("accepted", None, "0")
    wait_callbacks(sb)

    records = receiver.seen()
    assert [r["form"]["MessageStatus"] for r in records] == ["queued", "sent", "delivered"]
    info = sb.message_info(created.sid)
    assert [e["status"] for e in info["timeline"]] == ["queued", "sent", "delivered"]
    assert info["assigned_at"] == pytest.approx(info["created_at"] + 0.3)
    assert info["release_at"] == pytest.approx(info["created_at"] + 0.5)
    assert {r["form"]["From"] for r in records} == {info["sender"]}
    fetched = client.messages(created.sid).fetch()
    assert (fetched.from_, fetched.num_segments) == (info["sender"], "1")


def test_validity_period_is_validated_and_recorded(sb, receiver):
    client = sb.client()
    for bad in ("0", "36001", "abc", "1.5", "-3", ""):
        status, body, _ = raw_request(
            sb,
            "POST",
            "/Messages.json",
            {"To": "+15550800003", "From": FROM, "Body": "x", "ValidityPeriod": bad},
        )
        assert (status, body["code"], body["message"]) == (400, 21624, "Invalid validity period value"), bad
    assert sb.stats()["submissions"] == 0

    m = client.messages.create(
        to="+15550800003", from_=FROM, body="x", validity_period=600, status_callback=receiver.url("/v")
    )
    info = sb.message_info(m.sid)
    assert info["validity_period"] == 600
    assert info["form"]["ValidityPeriod"] == "600" and info["form"]["StatusCallback"] == receiver.url("/v")
    assert info["status_callback"] == receiver.url("/v")
    default = client.messages.create(to="+15550800003", from_=FROM, body="x")
    assert sb.message_info(default.sid)["validity_period"] == 36000
    assert "ValidityPeriod" not in sb.message_info(default.sid)["form"]
    with pytest.raises(urllib.error.HTTPError) as exc:
        sb.message_info("SM" + "0" * 32)
    assert exc.value.code == 404


def test_an_expired_message_fails_with_30036_and_one_failed_callback(sb, receiver):
    sb.config(sender_rate=0.1)  # one segment every 10 s
    client = sb.client()
    first = client.messages.create(to="+15550800004", from_=FROM, body="x", status_callback=receiver.url())
    late = client.messages.create(
        to="+15550800005", from_=FROM, body="x", validity_period=1, status_callback=receiver.url()
    )
    assert late.status == "queued"
    wait_for(lambda: len(receiver.seen()) == 3, what="three callbacks")

    statuses = receiver.statuses()
    assert statuses == {first.sid: ["sent", "delivered"], late.sid: ["failed"]}
    assert receiver.by_sid()[late.sid][0]["form"]["ErrorCode"] == "30036"
    fetched = client.messages(late.sid).fetch()
    assert (fetched.status, fetched.error_code, fetched.date_sent) == ("failed", 30036, None)
    info = sb.message_info(late.sid)
    assert info["final_at"] == pytest.approx(info["created_at"] + 1)


def test_a_full_queue_refuses_from_sends_and_fails_service_sends(sb, receiver):
    # one segment per 10 s and at most 25 s of queue: the 4th message of a sender would wait 30 s
    sb.config(sender_rate=0.1, queue_max_seconds=25)
    client = sb.client()
    sender = sb.message_info(
        client.messages.create(to="+15550800006", messaging_service_sid=SERVICE, body="x").sid
    )["sender"]
    for _ in range(2):
        client.messages.create(to="+15550800006", from_=FROM, body="x")
    client.messages.create(to="+15550800006", from_=FROM, body="x")  # released 20 s ahead: fits
    with pytest.raises(TwilioRestException) as exc:
        client.messages.create(to="+15550800006", from_=FROM, body="x")
    assert (exc.value.status, exc.value.code) == (400, 21611)
    assert "maximum number of queued messages" in exc.value.msg
    assert sb.stats()["submissions"] == 4

    for _ in range(2):  # fill the service's sender
        client.messages.create(to="+15550800007", messaging_service_sid=SERVICE, body="x")
    over = client.messages.create(
        to="+15550800007", messaging_service_sid=SERVICE, body="x", status_callback=receiver.url()
    )
    assert over.status == "accepted"  # accepted, then failed: Twilio's 30001 for service sends
    wait_callbacks(sb)
    assert receiver.statuses() == {over.sid: ["failed"]}
    assert receiver.seen()[0]["form"]["ErrorCode"] == "30001"
    fetched = client.messages(over.sid).fetch()
    assert (fetched.status, fetched.error_code, fetched.from_) == ("failed", 30001, sender)

    stats = sb.stats()
    assert stats["rejections"] == {"21611": 1}
    assert stats["by_outcome"]["queue_full"] == 1
    assert stats["submissions"] == 7


def test_opted_out_recipients_get_21610(sb, receiver):
    stop = "+15550800008"
    sb.config(opted_out=[stop])
    client = sb.client()
    with pytest.raises(TwilioRestException) as exc:
        client.messages.create(to=stop, from_=FROM, body="x")
    assert (exc.value.status, exc.value.code) == (400, 21610)
    assert sb.stats()["submissions"] == 0

    m = client.messages.create(
        to=stop, messaging_service_sid=SERVICE, body="x", status_callback=receiver.url()
    )
    assert m.status == "accepted"
    wait_callbacks(sb)
    assert receiver.statuses() == {m.sid: ["failed"]}
    assert receiver.seen()[0]["form"]["ErrorCode"] == "21610"
    assert client.messages(m.sid).fetch().error_code == 21610
    assert sb.stats()["rejections"] == {"21610": 1}


def test_creates_past_the_concurrency_cap_get_429_20429(sb):
    sb.config(max_concurrent_requests=2, latency_ms=5000)  # each create is held for 5 s
    client = sb.client()
    results: list = []

    def slow_create(i: int) -> None:
        results.append(client.messages.create(to=f"+155508001{i:02d}", from_=FROM, body="x").sid)

    threads = [threading.Thread(target=slow_create, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    wait_for(lambda: sb.stats()["in_flight"] == 2, what="two creates in flight")
    status, body, headers = raw_request(
        sb, "POST", "/Messages.json", {"To": "+15550800199", "From": FROM, "Body": "x"}
    )
    assert (status, body["code"], body["message"]) == (429, 20429, "Too Many Requests")
    assert "Retry-After" not in headers  # Twilio documents none

    sb.config(concurrency_retry_after_seconds=2)
    status, body, headers = raw_request(
        sb, "POST", "/Messages.json", {"To": "+15550800199", "From": FROM, "Body": "x"}
    )
    assert (status, headers.get("Retry-After")) == (429, "2")
    for thread in threads:
        thread.join(timeout=30)
    assert len(results) == 2
    stats = sb.stats()
    assert stats["submissions"] == 2 and stats["rejections"] == {"20429": 2}
    assert stats["by_outcome"]["concurrency_limited"] == 2

    sb.config(latency_ms=0)
    client.messages.create(to="+15550800198", from_=FROM, body="x")  # under the cap: accepted
    assert sb.stats()["submissions"] == 3


def test_auth_fail_answers_401_20003_everywhere_and_the_account_resource(sb):
    client = sb.client()
    account = client.api.v2010.accounts(sb.account_sid).fetch()
    assert (account.sid, account.status, account.type) == (sb.account_sid, "active", "Full")
    assert account.auth_token is None and account.date_created is not None
    sid = client.messages.create(to="+15550800010", from_=FROM, body="x").sid

    sb.config(auth_fail=True)
    calls = {
        "create": lambda: client.messages.create(to="+15550800010", from_=FROM, body="x"),
        "fetch": lambda: client.messages(sid).fetch(),
        "account": lambda: client.api.v2010.accounts(sb.account_sid).fetch(),
    }
    for name, call in calls.items():
        with pytest.raises(TwilioRestException) as exc:
            call()
        assert (exc.value.status, exc.value.code) == (401, 20003), name
    status, body, _ = raw_request(sb, "GET", "/Messages.json")
    assert (status, body["code"]) == (401, 20003)
    assert sb.stats()["rejections"] == {"20003": 1}

    sb.config(auth_fail=False, trial_prefix=True)
    assert client.api.v2010.accounts(sb.account_sid).fetch().type == "Trial"
    bad = sb.client()
    bad.auth = (bad.username, "wrong")
    with pytest.raises(TwilioRestException) as exc:
        bad.api.v2010.accounts(sb.account_sid).fetch()
    assert (exc.value.status, exc.value.code) == (401, 20003)


def test_trial_prefix_shows_in_create_fetch_and_list(sb):
    sb.config(trial_prefix=True)
    client = sb.client()
    m = client.messages.create(to="+15550800011", from_=FROM, body="hello")
    expected = "Sent from your Twilio trial account - hello"
    assert m.body == expected
    assert client.messages(m.sid).fetch().body == expected
    assert [x.body for x in client.messages.list(to="+15550800011")] == [expected]


def test_sdk_paging_while_statuses_change_has_no_duplicates_or_gaps(sb):
    sb.config(sender_rate=4)  # 12 messages leave the queue over 3 s, while they are being listed
    client = sb.client()
    sids = {client.messages.create(to="+15550800012", from_=FROM, body=str(i)).sid for i in range(12)}
    listed = [m.sid for m in client.messages.stream(to="+15550800012", page_size=2)]
    assert len(listed) == len(set(listed)) == 12 and set(listed) == sids
    by_from = [m.sid for m in client.messages.stream(from_=FROM, to="+15550800012", page_size=5)]
    assert sorted(by_from) == sorted(listed)


def test_list_puts_unsent_messages_first_and_date_sent_filters_skip_them(sb):
    client = sb.client()
    sent = client.messages.create(to="+15550800013", from_=FROM, body="sent")
    wait_for(lambda: client.messages(sent.sid).fetch().date_sent is not None, what="sent")
    sb.config(queue_delay_ms=60_000)  # the next ones stay queued
    client.messages.create(to="+15550800013", from_=FROM, body="queued 1")
    client.messages.create(to="+15550800013", from_=FROM, body="queued 2")

    listed = client.messages.list(to="+15550800013")
    assert [m.body for m in listed] == ["queued 2", "queued 1", "sent"]
    assert [m.date_sent is None for m in listed] == [True, True, False]
    today = sent.date_created.strftime("%Y-%m-%d")
    assert [m.body for m in client.messages.list(to="+15550800013", date_sent=today)] == ["sent"]
    assert [m.body for m in client.messages.list(to="+15550800013", date_sent_after=today)] == ["sent"]


def test_stats_count_by_status_and_per_sender(sb):
    sb.config(queue_delay_ms=60_000)
    client = sb.client()
    for i in range(3):
        client.messages.create(to=f"+1555080002{i}", from_=FROM, body="x")
    with pytest.raises(TwilioRestException):
        client.messages.create(to="+15550800029", body="x", from_=FROM, validity_period=0)
    stats = sb.stats()
    assert stats["by_status"] == {"queued": 3}
    assert set(stats["senders"]) == {FROM}
    row = stats["senders"][FROM]
    assert (row["submitted"], row["sent"], row["max_sent_per_second"]) == (3, 0, 0)
    assert 1 <= row["max_submitted_per_second"] <= 3  # 3 creates, possibly across a second boundary
    assert stats["rejections"] == {"21624": 1}
    assert {"submissions", "by_outcome", "in_flight", "max_in_flight", "connections", "callbacks"} <= set(
        stats
    )
