"""The sandbox's status callbacks: Twilio's form and signature, shares, delays, duplicates, order, drops,
early callbacks, retries, replay and stats, seen by a real HTTP receiver running inside the test."""

from __future__ import annotations

import re
import threading
import time
import urllib.error
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl

import pytest
from twilio.request_validator import RequestValidator

from delivery.providers.twilio.sandbox.callbacks import twilio_signature
from delivery.providers.twilio.sandbox.lifecycle import dlr_done_date
from delivery.providers.twilio.sandbox.server import parse_args
from tests.sandbox_process import unused_port

FROM = "+15005550006"
SERVICE = "MG" + "b" * 32
FIELDS = {"AccountSid", "ApiVersion", "From", "MessageSid", "MessageStatus", "SmsSid", "SmsStatus", "To"}
DLR_DATE = re.compile(r"\d{10}")  # RawDlrDoneDate: YYMMDDhhmm
FAST = {"callback_delay_ms": 0, "callback_gap_ms": 0, "callback_retry_backoff_ms": 10}


class Receiver:
    """A StatusCallback endpoint: records every request (arrival time, full URL, headers, form) and
    answers 200, or ``fail_status`` for the first ``fail_first`` requests, after ``hang_seconds``."""

    def __init__(self, fail_first: int = 0, fail_status: int = 500) -> None:
        self.records: list[dict] = []
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.hang_seconds = 0.0  # when set, every request waits this long before its answer
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a real web server would

            def do_POST(self) -> None:
                arrived = time.monotonic()
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    failing = receiver.fail_first > 0
                    receiver.fail_first -= failing
                    receiver.records.append(
                        {
                            "at": arrived,
                            "url": f"http://{self.headers['Host']}{self.path}",
                            "headers": dict(self.headers),
                            "form": dict(parse_qsl(raw.decode(), keep_blank_values=True)),
                            "answered": receiver.fail_status if failing else 200,
                        }
                    )
                if receiver.hang_seconds:
                    time.sleep(receiver.hang_seconds)
                self.send_response(receiver.fail_status if failing else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def url(self, path: str = "/cb") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def seen(self) -> list[dict]:
        with self.lock:
            return list(self.records)

    def by_sid(self) -> dict[str, list[dict]]:
        grouped = defaultdict(list)
        for record in self.seen():
            grouped[record["form"]["MessageSid"]].append(record)
        return grouped

    def statuses(self) -> dict[str, list[str]]:
        return {sid: [r["form"]["MessageStatus"] for r in rs] for sid, rs in self.by_sid().items()}


@pytest.fixture
def receiver():
    r = Receiver()
    r.thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture
def cb(sandbox):
    """The sandbox reset, with callbacks sent at once; returns the sandbox."""
    sandbox.reset()
    sandbox.config(**FAST)
    yield sandbox
    sandbox.reset()


def wait_callbacks(sandbox, timeout: float = 10.0) -> dict:
    """Stats once every scheduled callback is out (sent, failed or dropped)."""
    deadline = time.monotonic() + timeout
    while True:
        stats = sandbox.stats()["callbacks"]
        if stats["pending"] == 0:
            return stats
        assert time.monotonic() < deadline, stats
        time.sleep(0.02)


def create(sandbox, receiver, n: int, path: str = "/cb", **kwargs) -> list[str]:
    client = sandbox.client()
    kwargs.setdefault("from_", FROM)
    return [
        client.messages.create(
            to=f"+1555060{i:04d}", body=f"m{i}", status_callback=receiver.url(path), **kwargs
        ).sid
        for i in range(n)
    ]


def wait_for(condition, timeout: float = 10.0, what: str = "condition"):
    """Poll ``condition`` until it returns something truthy, and return it; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def replay(sandbox, payload: dict) -> dict:
    return sandbox._request("POST", "/_sandbox/callbacks/replay", payload)


def test_twilio_order_fields_and_valid_signatures(cb, receiver):
    path = "/receipts/twilio/?tenant=acme&note=a%20b"  # the query string is part of what is signed
    sids = create(cb, receiver, 5, path)
    sids.append(
        cb.client()
        .messages.create(
            to="+15550609999",
            messaging_service_sid=SERVICE,
            body="via service",
            status_callback=receiver.url(path),
        )
        .sid
    )
    stats = wait_callbacks(cb)

    # no callback for the initial status; a service send gets "queued" when its sender is assigned
    assert stats == {"sent": 13, "failed": 0, "dropped": 0, "pending": 0, "attempts": 13, "retries": 0}
    assert receiver.statuses() == {
        sid: ["queued", "sent", "delivered"] if sid == sids[-1] else ["sent", "delivered"] for sid in sids
    }
    validator = RequestValidator(cb.auth_token)
    for sid, records in receiver.by_sid().items():
        final_at = cb.message_info(sid)["final_at"]
        for record in records:
            form, headers = record["form"], record["headers"]
            expected = FIELDS | ({"MessagingServiceSid"} if sid == sids[-1] else set())
            if form["MessageStatus"] == "delivered":
                expected = expected | {"RawDlrDoneDate"}
                assert DLR_DATE.fullmatch(form["RawDlrDoneDate"])
                assert form["RawDlrDoneDate"] == dlr_done_date(final_at)
            assert set(form) == expected  # no ErrorCode on queued/sent/delivered
            assert form["MessageSid"] == form["SmsSid"] == sid
            assert form["MessageStatus"] == form["SmsStatus"]
            assert form["AccountSid"] == cb.account_sid and form["ApiVersion"] == "2010-04-01"
            assert headers["Content-Type"] == "application/x-www-form-urlencoded"
            assert headers["User-Agent"].startswith("TwilioProxy/")
            assert len(headers["I-Twilio-Idempotency-Token"]) == 32
            assert "X-Twilio-Webhooks-Signature-Settings" not in headers
            assert record["url"] == receiver.url(path)
            signature = headers["X-Twilio-Signature"]
            assert validator.validate(record["url"], form, signature)
            assert not validator.validate(record["url"], {**form, "MessageStatus": "failed"}, signature)
            assert not validator.validate(record["url"].replace("acme", "evil"), form, signature)
            assert not RequestValidator("another-token").validate(record["url"], form, signature)
    by_sid = receiver.by_sid()
    assert by_sid[sids[0]][0]["form"]["To"] == "+15550600000" and by_sid[sids[0]][0]["form"]["From"] == FROM
    service_from = by_sid[sids[-1]][0]["form"]["From"]
    assert re.fullmatch(r"\+1500555\d{4}", service_from)  # the sender assigned to the service
    assert by_sid[sids[-1]][0]["form"]["MessagingServiceSid"] == SERVICE

    client = cb.client()
    assert {client.messages(sid).fetch().status for sid in sids} == {"delivered"}
    assert {m.status for m in client.messages.list()} == {"delivered"}
    assert client.messages(sids[-1]).fetch().from_ == service_from


def test_signature_matches_the_sdk_for_any_params():
    params = {"Body": "héllo & ünïcode=1", "To": "+1555", "a": "", "Z": "z", "MessageStatus": "sent"}
    url = "https://example.com:8443/cb?x=1&y=%2F"
    expected = RequestValidator("token-ä").compute_signature(url, params)
    assert twilio_signature("token-ä", url, params) == expected
    sha256 = RequestValidator("key-ä").compute_signature(url, params, algorithm="HMAC_SHA256")
    assert twilio_signature("key-ä", url, params, "HMAC_SHA256") == sha256 != expected


def test_shared_key_signs_with_hmac_sha256_and_names_the_key(cb, receiver):
    cb.config(callback_shared_key_id="KS" + "1" * 32, callback_shared_key_secret="shared-secret")
    create(cb, receiver, 2, "/cb?x=1")
    wait_callbacks(cb)

    records = receiver.seen()
    assert len(records) == 4
    for record in records:
        headers, form = record["headers"], record["form"]
        assert headers["X-Twilio-Webhooks-Signature-Settings"] == f"key=KS{'1' * 32},algorithm=HMAC_SHA256"
        signature = headers["X-Twilio-Signature"]
        assert RequestValidator("shared-secret").validate(
            record["url"], form, signature, algorithm="HMAC_SHA256"
        )
        assert not RequestValidator("shared-secret").validate(record["url"], form, signature)  # not SHA1
        assert not RequestValidator(cb.auth_token).validate(
            record["url"], form, signature, algorithm="HMAC_SHA256"
        )

    cb.config(callback_shared_key_secret="")  # both are needed: back to the auth token
    create(cb, receiver, 1, "/cb?x=2")
    wait_callbacks(cb)
    [last] = receiver.seen()[4:5]
    assert "X-Twilio-Webhooks-Signature-Settings" not in last["headers"]
    assert RequestValidator(cb.auth_token).validate(
        last["url"], last["form"], last["headers"]["X-Twilio-Signature"]
    )


def test_an_undelivered_final_follows_sent_with_30003_and_a_dlr_date(cb, receiver):
    cb.config(callback_undelivered_share=1)
    sids = create(cb, receiver, 5)
    wait_callbacks(cb)

    assert receiver.statuses() == {sid: ["sent", "undelivered"] for sid in sids}
    for records in receiver.by_sid().values():
        assert "ErrorCode" not in records[0]["form"] and "RawDlrDoneDate" not in records[0]["form"]
        assert records[1]["form"]["ErrorCode"] == "30003"
        assert DLR_DATE.fullmatch(records[1]["form"]["RawDlrDoneDate"])
        assert RequestValidator(cb.auth_token).validate(
            records[1]["url"], records[1]["form"], records[1]["headers"]["X-Twilio-Signature"]
        )
    fetched = cb.client().messages(sids[0]).fetch()
    assert (fetched.status, fetched.error_code, fetched.error_message) == (
        "undelivered",
        30003,
        "Unreachable destination handset",
    )
    assert fetched.date_sent is not None and fetched.price == "-0.00790"  # sent, so charged


def test_a_failed_message_gets_one_failed_callback_and_is_never_sent(cb, receiver):
    cb.config(callback_failed_share=1, callback_gap_ms=300)
    sids = create(cb, receiver, 5)
    wait_callbacks(cb)

    assert receiver.statuses() == {sid: ["failed"] for sid in sids}
    for records in receiver.by_sid().values():
        form = records[0]["form"]
        assert form["ErrorCode"] == "30008" and "RawDlrDoneDate" not in form
    fetched = cb.client().messages(sids[0]).fetch()
    assert (fetched.status, fetched.error_code, fetched.error_message) == ("failed", 30008, "Unknown error")
    assert fetched.date_sent is None and fetched.price is None  # never sent, not charged
    info = cb.message_info(sids[0])
    assert info["timeline"] == [{"status": "failed", "at": info["release_at"]}]  # at release, no gap


def test_mixed_shares_split_the_finals(cb, receiver):
    cb.config(callback_undelivered_share=0.3, callback_failed_share=0.3)
    sids = create(cb, receiver, 200)
    wait_callbacks(cb)

    statuses = receiver.statuses()
    finals = [s[-1] for s in statuses.values()]
    assert len(finals) == len(sids)
    assert all(s == ["failed"] for s in statuses.values() if s[-1] == "failed")
    assert all(s[0] == "sent" for s in statuses.values() if s[-1] != "failed")
    assert 30 <= finals.count("undelivered") <= 90
    assert 30 <= finals.count("failed") <= 90
    assert 50 <= finals.count("delivered") <= 130


def test_repeat_sends_each_callback_that_many_times(cb, receiver):
    cb.config(callback_repeat=3)
    sids = create(cb, receiver, 4)
    stats = wait_callbacks(cb)

    assert stats["sent"] == 4 * 2 * 3
    assert receiver.statuses() == {sid: ["sent"] * 3 + ["delivered"] * 3 for sid in sids}
    tokens = [r["headers"]["I-Twilio-Idempotency-Token"] for r in receiver.seen()]
    assert len(set(tokens)) == len(tokens)  # duplicates, not retries: each copy is its own delivery


def test_shuffle_sends_some_messages_out_of_order_without_moving_status_back(cb, receiver):
    cb.config(callback_shuffle=True)
    sids = create(cb, receiver, 40)
    wait_callbacks(cb)

    statuses = receiver.statuses()
    assert all(sorted(statuses[sid]) == ["delivered", "sent"] for sid in sids)
    assert any(statuses[sid] == ["delivered", "sent"] for sid in sids)
    assert any(statuses[sid] == ["sent", "delivered"] for sid in sids)
    assert {m.status for m in cb.client().messages.list()} == {"delivered"}  # a late "sent" is ignored


def test_drop_rate_one_sends_nothing_but_the_provider_status_still_moves(cb, receiver):
    cb.config(callback_drop_rate=1)
    sids = create(cb, receiver, 10)
    stats = wait_callbacks(cb)

    assert stats == {"sent": 0, "failed": 0, "dropped": 20, "pending": 0, "attempts": 0, "retries": 0}
    assert receiver.seen() == []
    assert cb.client().messages(sids[0]).fetch().status == "delivered"


def test_partial_drop_rate(cb, receiver):
    cb.config(callback_drop_rate=0.5)
    create(cb, receiver, 100)
    stats = wait_callbacks(cb)

    assert stats["sent"] + stats["dropped"] == 200
    assert 60 <= stats["dropped"] <= 140
    assert len(receiver.seen()) == stats["sent"]


def test_early_rate_one_posts_the_first_callback_before_the_create_returns(cb, receiver):
    cb.config(callback_early_rate=1, callback_delay_ms=30000, callback_gap_ms=200)
    client = cb.client()
    started, returned = {}, {}
    for i in range(5):
        before = time.monotonic()
        message = client.messages.create(
            to=f"+1555061{i:04d}", from_=FROM, body="x", status_callback=receiver.url()
        )
        started[message.sid], returned[message.sid] = before, time.monotonic()
        assert message.status == "queued"  # the create answer was rendered before the callback
    wait_callbacks(cb)

    by_sid = receiver.by_sid()
    assert set(by_sid) == set(returned)
    for sid, records in by_sid.items():
        assert [r["form"]["MessageStatus"] for r in records] == ["sent", "delivered"]
        assert records[0]["at"] < returned[sid]  # seen by the receiver before the client had the sid
        # the rest follows at its status change (the gap), not after the 30 s delay
        assert 0.19 <= records[1]["at"] - started[sid] < 15


def test_delay_and_gap_do_not_block_the_create_and_the_store_does_not_wait(cb, receiver):
    cb.config(callback_delay_ms=1000, callback_gap_ms=200)
    client = cb.client()
    started = {}
    for i in range(10):
        before = time.monotonic()
        message = client.messages.create(
            to=f"+1555062{i:04d}", from_=FROM, body="x", status_callback=receiver.url()
        )
        started[message.sid] = before
        assert time.monotonic() - before < 0.5  # the create does not wait for the delay
    # the store shows the status changes when they happen; only the callbacks are delayed
    wait_for(lambda: client.messages(message.sid).fetch().status == "delivered", what="delivered")
    wait_callbacks(cb)

    by_sid = receiver.by_sid()
    assert set(by_sid) == set(started)
    for sid, records in by_sid.items():
        assert [r["form"]["MessageStatus"] for r in records] == ["sent", "delivered"]
        assert records[0]["at"] - started[sid] >= 0.99  # sent at the create, posted 1 s later
        assert records[1]["at"] - started[sid] >= 1.19  # delivered 200 ms later, posted 1 s after that


def test_failed_posts_are_retried_under_a_5xx_policy_with_the_same_signature(cb, receiver):
    receiver.fail_first = 2
    cb.config(callback_retries=3, callback_retry_policy="5xx")
    create(cb, receiver, 1)
    stats = wait_callbacks(cb)

    assert stats == {"sent": 2, "failed": 0, "dropped": 0, "pending": 0, "attempts": 4, "retries": 2}
    records = receiver.seen()
    assert [(r["form"]["MessageStatus"], r["answered"]) for r in records] == [
        ("sent", 500),
        ("sent", 500),
        ("sent", 200),
        ("delivered", 200),
    ]
    first_three = {
        (r["headers"]["X-Twilio-Signature"], r["headers"]["I-Twilio-Idempotency-Token"]) for r in records[:3]
    }
    assert len(first_three) == 1  # one callback, retried as is
    assert records[2]["at"] - records[0]["at"] >= 0.025  # backoff 10 ms, then 20 ms


@pytest.mark.parametrize("status", [500, 503, 429, 404])
def test_by_default_no_http_answer_is_retried(cb, receiver, status):
    # Twilio's defaults: rc=1, rp=ct -- a retry only when the connection could not be made
    receiver.fail_first = 1000
    receiver.fail_status = status
    create(cb, receiver, 2)
    stats = wait_callbacks(cb)

    assert cb.config()["callback_retries"] == 1 and cb.config()["callback_retry_policy"] == "ct"
    assert stats == {"sent": 0, "failed": 4, "dropped": 0, "pending": 0, "attempts": 4, "retries": 0}


def test_posts_that_keep_failing_are_given_up_and_counted(cb, receiver):
    receiver.fail_first = 1000
    receiver.fail_status = 503
    cb.config(callback_retries=2, callback_retry_policy="4xx,5xx")
    create(cb, receiver, 3)
    stats = wait_callbacks(cb)

    assert stats == {"sent": 0, "failed": 6, "dropped": 0, "pending": 0, "attempts": 18, "retries": 12}
    assert len(receiver.seen()) == 18


def test_a_4xx_policy_retries_a_429(cb, receiver):
    receiver.fail_first = 1
    receiver.fail_status = 429
    cb.config(callback_retry_policy="4xx")
    create(cb, receiver, 1)
    stats = wait_callbacks(cb)

    assert stats == {"sent": 2, "failed": 0, "dropped": 0, "pending": 0, "attempts": 3, "retries": 1}


def test_a_read_timeout_is_retried_only_under_the_rt_policy(cb, receiver):
    receiver.hang_seconds = 0.6
    cb.config(callback_timeout_ms=200, callback_failed_share=1)  # one callback per message
    create(cb, receiver, 1)
    stats = wait_callbacks(cb)
    assert stats == {"sent": 0, "failed": 1, "dropped": 0, "pending": 0, "attempts": 1, "retries": 0}

    cb.config(callback_retry_policy="ct,rt", callback_retries=2)
    create(cb, receiver, 1)
    stats = wait_callbacks(cb)
    assert stats["attempts"] == 1 + 3 and stats["retries"] == 2 and stats["failed"] == 2


def test_the_total_timeout_caps_all_attempts_of_one_callback(cb, receiver):
    receiver.hang_seconds = 2.0
    cb.config(
        callback_timeout_ms=250,
        callback_total_timeout_ms=400,
        callback_retry_policy="all",
        callback_retries=10,
        callback_failed_share=1,
    )
    create(cb, receiver, 1)
    stats = wait_callbacks(cb)

    # 250 ms, a 10 ms backoff, then at most the 140 ms left: never the 11 attempts allowed
    assert stats["failed"] == 1 and 1 <= stats["attempts"] <= 3


def test_connection_refused_is_retried_then_given_up(cb):
    client = cb.client()
    url = f"http://127.0.0.1:{unused_port()}/cb"
    sid = client.messages.create(to="+15550630000", from_=FROM, body="x", status_callback=url).sid
    stats = wait_callbacks(cb)
    # Twilio's default: one retry of a failed connect
    assert stats == {"sent": 0, "failed": 2, "dropped": 0, "pending": 0, "attempts": 4, "retries": 2}

    cb.config(callback_retries=2)
    client.messages.create(to="+15550630000", from_=FROM, body="x", status_callback=url)
    stats = wait_callbacks(cb)
    assert stats == {"sent": 0, "failed": 4, "dropped": 0, "pending": 0, "attempts": 10, "retries": 6}
    assert client.messages(sid).fetch().status == "delivered"  # the provider delivered it regardless


def test_an_unusable_callback_url_is_given_up_at_once(cb):
    cb.client().messages.create(
        to="+15550630001", from_=FROM, body="x", status_callback="ftp://example.com/cb"
    )
    stats = wait_callbacks(cb)

    assert stats == {"sent": 0, "failed": 2, "dropped": 0, "pending": 0, "attempts": 2, "retries": 0}


def test_replay_resends_the_same_callbacks(cb, receiver):
    cb.config(callback_failed_share=0.5)
    sids = create(cb, receiver, 6)
    wait_callbacks(cb)
    first = receiver.by_sid()
    counts = {sid: len(first[sid]) for sid in sids}
    assert set(counts.values()) <= {1, 2}

    assert replay(cb, {"sid": sids[0]}) == {"messages": 1, "callbacks": counts[sids[0]]}
    wait_callbacks(cb)
    again = receiver.by_sid()[sids[0]]
    assert [r["form"] for r in again[counts[sids[0]] :]] == [r["form"] for r in first[sids[0]]]
    assert [r["headers"]["X-Twilio-Signature"] for r in again[counts[sids[0]] :]] == [
        r["headers"]["X-Twilio-Signature"] for r in first[sids[0]]
    ]

    total = sum(counts.values())
    assert replay(cb, {"all": True}) == {"messages": 6, "callbacks": total}
    stats = wait_callbacks(cb)
    assert stats["sent"] == total + counts[sids[0]] + total
    assert {sid: len(records) for sid, records in receiver.by_sid().items()} == {
        sid: counts[sid] * (3 if sid == sids[0] else 2) for sid in sids
    }
    assert all(
        statuses[: counts[sid]] == statuses[-counts[sid] :] for sid, statuses in receiver.statuses().items()
    )

    for payload, code in (({"sid": "SM" + "0" * 32}, 404), ({}, 400), ({"all": "yes"}, 400)):
        with pytest.raises(urllib.error.HTTPError) as exc:
            replay(cb, payload)
        assert exc.value.code == code


def test_disabled_callbacks_send_nothing_yet_the_status_moves(cb, receiver):
    cb.config(callbacks_enabled=False)
    sids = create(cb, receiver, 3)
    client = cb.client()
    wait_for(lambda: client.messages(sids[-1]).fetch().status == "delivered", what="delivered")

    assert cb.stats()["callbacks"]["pending"] == 0
    assert receiver.seen() == []
    with pytest.raises(urllib.error.HTTPError):
        replay(cb, {"sid": sids[0]})


def test_reset_forgets_scheduled_callbacks(cb, receiver):
    cb.config(callback_delay_ms=300)
    create(cb, receiver, 3)
    assert cb.stats()["callbacks"]["pending"] == 6
    cb.reset()
    assert cb.stats()["callbacks"] == {
        "sent": 0,
        "failed": 0,
        "dropped": 0,
        "pending": 0,
        "attempts": 0,
        "retries": 0,
    }
    # a callback sent after the reset would arrive within ~300 ms; a marker sent later proves the
    # receiver saw everything before it
    cb.config(callback_delay_ms=600)
    marker = create(cb, receiver, 1, "/marker")[0]
    wait_callbacks(cb)
    assert set(receiver.by_sid()) == {marker}


def test_callback_config_is_validated(cb):
    for bad in (
        {"callback_undelivered_share": 0.6, "callback_failed_share": 0.6},
        {"callback_delivered_share": 1.5},
        {"callback_repeat": 0},
        {"callback_repeat": 1.5},
        {"callbacks_enabled": "maybe"},
        {"callback_drop_rate": 2},
        {"callback_delay_ms": -1},
        {"callback_retries": 99},
        {"callback_retry_policy": "never"},
        {"callback_retry_policy": ""},
        {"callback_retry_policy": "ct,5xx,bogus"},
        {"callback_total_timeout_ms": -1},
        {"callback_shared_key_id": 5},
    ):
        with pytest.raises(urllib.error.HTTPError) as exc:
            cb.config(**bad)
        assert exc.value.code == 400, bad
    config = cb.config(
        callback_shuffle=True, callback_repeat=2, callback_early_rate=0.5, callback_retry_policy=" RT, 5xx "
    )
    assert (config["callback_shuffle"], config["callback_repeat"], config["callback_early_rate"]) == (
        True,
        2,
        0.5,
    )
    assert config["callback_retry_policy"] == "rt,5xx"


def test_flags_and_environment(monkeypatch):
    monkeypatch.setenv("SANDBOX_CALLBACK_REPEAT", "2")
    monkeypatch.setenv("SANDBOX_CALLBACKS_ENABLED", "false")
    monkeypatch.setenv("SANDBOX_OPTED_OUT", "+15550000001, +15550000002")
    monkeypatch.setenv("SANDBOX_CALLBACK_RETRY_POLICY", "all")
    args = parse_args(
        [
            "--callback-shuffle",
            "true",
            "--callback-drop-rate",
            "0.25",
            "--callback-delay-ms",
            "0",
            "--sender-rate",
            "1",
            "--max-concurrent-requests",
            "3",
            "--callback-shared-key-id",
            "KS1",
            "--trial-prefix",
            "yes",
        ]
    )
    assert args.callback_repeat == 2
    assert args.callbacks_enabled is False
    assert args.callback_shuffle is True
    assert (args.callback_drop_rate, args.callback_delay_ms) == (0.25, 0.0)
    assert args.opted_out == ["+15550000001", "+15550000002"]
    assert args.callback_retry_policy == "all" and args.callback_shared_key_id == "KS1"
    assert (args.sender_rate, args.max_concurrent_requests, args.trial_prefix) == (1.0, 3, True)
    assert parse_args(["--opted-out", '["+15550000003"]']).opted_out == ["+15550000003"]
    with pytest.raises(SystemExit):
        parse_args(["--callback-shuffle", "perhaps"])
