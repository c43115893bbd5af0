"""The sandbox's status callbacks: Twilio's form and signature, shares, delays, duplicates, order, drops,
early callbacks, retries, replay and stats, seen by a real HTTP receiver running inside the test."""

from __future__ import annotations

import threading
import time
import urllib.error
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl

import pytest
from twilio.request_validator import RequestValidator

from delivery.sandbox.callbacks import twilio_signature
from delivery.sandbox.server import parse_args
from tests.sandbox_process import unused_port

FROM = "+15005550006"
SERVICE = "MG" + "b" * 32
FIELDS = {"AccountSid", "ApiVersion", "From", "MessageSid", "MessageStatus", "SmsSid", "SmsStatus", "To"}
FAST = {"callback_delay_ms": 0, "callback_gap_ms": 0, "callback_retry_backoff_ms": 10}


class Receiver:
    """A StatusCallback endpoint: records every request (arrival time, full URL, headers, form) and
    answers 200, or ``fail_status`` for the first ``fail_first`` requests."""

    def __init__(self, fail_first: int = 0, fail_status: int = 500) -> None:
        self.records: list[dict] = []
        self.fail_first = fail_first
        self.fail_status = fail_status
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


def replay(sandbox, payload: dict) -> dict:
    return sandbox._request("POST", "/_sandbox/callbacks/replay", payload)


def test_sent_then_delivered_with_twilio_fields_and_valid_signatures(cb, receiver):
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

    assert stats == {"sent": 12, "failed": 0, "dropped": 0, "pending": 0, "attempts": 12, "retries": 0}
    assert receiver.statuses() == {sid: ["sent", "delivered"] for sid in sids}
    validator = RequestValidator(cb.auth_token)
    for sid, records in receiver.by_sid().items():
        for record in records:
            form, headers = record["form"], record["headers"]
            expected = FIELDS | ({"MessagingServiceSid"} if sid == sids[-1] else set())
            assert set(form) == expected  # no ErrorCode on sent/delivered
            assert form["MessageSid"] == form["SmsSid"] == sid
            assert form["MessageStatus"] == form["SmsStatus"]
            assert form["AccountSid"] == cb.account_sid and form["ApiVersion"] == "2010-04-01"
            assert headers["Content-Type"] == "application/x-www-form-urlencoded"
            assert headers["User-Agent"].startswith("TwilioProxy/")
            assert len(headers["I-Twilio-Idempotency-Token"]) == 32
            assert record["url"] == receiver.url(path)
            signature = headers["X-Twilio-Signature"]
            assert validator.validate(record["url"], form, signature)
            assert not validator.validate(record["url"], {**form, "MessageStatus": "failed"}, signature)
            assert not validator.validate(record["url"].replace("acme", "evil"), form, signature)
            assert not RequestValidator("another-token").validate(record["url"], form, signature)
    by_sid = receiver.by_sid()
    assert by_sid[sids[0]][0]["form"]["To"] == "+15550600000" and by_sid[sids[0]][0]["form"]["From"] == FROM
    assert by_sid[sids[-1]][0]["form"]["MessagingServiceSid"] == SERVICE

    client = cb.client()
    assert {client.messages(sid).fetch().status for sid in sids} == {"delivered"}
    assert {m.status for m in client.messages.list()} == {"delivered"}


def test_signature_matches_the_sdk_for_any_params():
    params = {"Body": "héllo & ünïcode=1", "To": "+1555", "a": "", "Z": "z", "MessageStatus": "sent"}
    url = "https://example.com:8443/cb?x=1&y=%2F"
    expected = RequestValidator("token-ä").compute_signature(url, params)
    assert twilio_signature("token-ä", url, params) == expected


@pytest.mark.parametrize(
    ("share", "status", "code", "message"),
    [
        ("callback_undelivered_share", "undelivered", "30003", "Unreachable destination handset"),
        ("callback_failed_share", "failed", "30008", "Unknown error"),
    ],
)
def test_a_share_of_one_makes_every_final_that_status(cb, receiver, share, status, code, message):
    cb.config(**{share: 1})
    sids = create(cb, receiver, 10)
    wait_callbacks(cb)

    assert receiver.statuses() == {sid: ["sent", status] for sid in sids}
    for records in receiver.by_sid().values():
        assert "ErrorCode" not in records[0]["form"]
        assert records[1]["form"]["ErrorCode"] == code
        assert RequestValidator(cb.auth_token).validate(
            records[1]["url"], records[1]["form"], records[1]["headers"]["X-Twilio-Signature"]
        )
    fetched = cb.client().messages(sids[0]).fetch()
    assert (fetched.status, fetched.error_code, fetched.error_message) == (status, int(code), message)


def test_mixed_shares_split_the_finals(cb, receiver):
    cb.config(callback_undelivered_share=0.3, callback_failed_share=0.3)
    sids = create(cb, receiver, 200)
    wait_callbacks(cb)

    finals = [statuses[1] for statuses in receiver.statuses().values()]
    assert len(finals) == len(sids)
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
    time.sleep(0.1)
    assert receiver.seen() == []
    assert cb.client().messages(sids[0]).fetch().status == "delivered"


def test_partial_drop_rate(cb, receiver):
    cb.config(callback_drop_rate=0.5)
    create(cb, receiver, 100)
    stats = wait_callbacks(cb)

    assert stats["sent"] + stats["dropped"] == 200
    assert 60 <= stats["dropped"] <= 140
    assert len(receiver.seen()) == stats["sent"]


def test_early_rate_one_posts_sent_before_the_create_returns(cb, receiver):
    cb.config(callback_early_rate=1, callback_delay_ms=5000, callback_gap_ms=200)
    client = cb.client()
    returned = {}
    for i in range(5):
        message = client.messages.create(
            to=f"+1555061{i:04d}", from_=FROM, body="x", status_callback=receiver.url()
        )
        returned[message.sid] = time.monotonic()
        assert message.status == "queued"  # the create answer was rendered before the callback
    wait_callbacks(cb)

    by_sid = receiver.by_sid()
    assert set(by_sid) == set(returned)
    for sid, records in by_sid.items():
        assert [r["form"]["MessageStatus"] for r in records] == ["sent", "delivered"]
        assert records[0]["at"] < returned[sid]  # seen by the receiver before the client had the sid
        assert records[1]["at"] - records[0]["at"] >= 0.18  # the rest follows after the gap, not the delay


def test_delay_and_gap_do_not_block_the_create(cb, receiver):
    cb.config(callback_delay_ms=1000, callback_gap_ms=200)
    client = cb.client()
    created = {}
    for i in range(10):
        started = time.monotonic()
        message = client.messages.create(
            to=f"+1555062{i:04d}", from_=FROM, body="x", status_callback=receiver.url()
        )
        created[message.sid] = time.monotonic()
        assert created[message.sid] - started < 0.5  # the create does not wait for the delay
    assert client.messages(message.sid).fetch().status == "queued"  # nothing happened yet
    wait_callbacks(cb)

    by_sid = receiver.by_sid()
    assert set(by_sid) == set(created)
    for sid, records in by_sid.items():
        assert [r["form"]["MessageStatus"] for r in records] == ["sent", "delivered"]
        assert records[0]["at"] - created[sid] >= 0.98
        assert records[1]["at"] - records[0]["at"] >= 0.18


def test_failed_posts_are_retried_with_the_same_signature_then_succeed(cb, receiver):
    receiver.fail_first = 2
    cb.config(callback_retries=3)
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


def test_posts_that_keep_failing_are_given_up_and_counted(cb, receiver):
    receiver.fail_first = 1000
    receiver.fail_status = 503
    cb.config(callback_retries=2)
    create(cb, receiver, 3)
    stats = wait_callbacks(cb)

    assert stats == {"sent": 0, "failed": 6, "dropped": 0, "pending": 0, "attempts": 18, "retries": 12}
    assert len(receiver.seen()) == 18


def test_a_4xx_answer_is_not_retried(cb, receiver):
    receiver.fail_first = 1000
    receiver.fail_status = 404
    create(cb, receiver, 2)
    stats = wait_callbacks(cb)

    assert stats == {"sent": 0, "failed": 4, "dropped": 0, "pending": 0, "attempts": 4, "retries": 0}


def test_connection_refused_is_retried_then_given_up(cb):
    cb.config(callback_retries=2)
    client = cb.client()
    sid = client.messages.create(
        to="+15550630000", from_=FROM, body="x", status_callback=f"http://127.0.0.1:{unused_port()}/cb"
    ).sid
    stats = wait_callbacks(cb)

    assert stats == {"sent": 0, "failed": 2, "dropped": 0, "pending": 0, "attempts": 6, "retries": 4}
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

    assert replay(cb, {"sid": sids[0]}) == {"messages": 1, "callbacks": 2}
    wait_callbacks(cb)
    again = receiver.by_sid()[sids[0]]
    assert [r["form"] for r in again[2:]] == [r["form"] for r in first[sids[0]]]
    assert [r["headers"]["X-Twilio-Signature"] for r in again[2:]] == [
        r["headers"]["X-Twilio-Signature"] for r in first[sids[0]]
    ]

    assert replay(cb, {"all": True}) == {"messages": 6, "callbacks": 12}
    stats = wait_callbacks(cb)
    assert stats["sent"] == 12 + 2 + 12
    assert {sid: len(records) for sid, records in receiver.by_sid().items()} == {
        sid: 6 if sid == sids[0] else 4 for sid in sids
    }
    assert all(statuses[:2] == statuses[-2:] for statuses in receiver.statuses().values())

    for payload, code in (({"sid": "SM" + "0" * 32}, 404), ({}, 400), ({"all": "yes"}, 400)):
        with pytest.raises(urllib.error.HTTPError) as exc:
            replay(cb, payload)
        assert exc.value.code == code


def test_disabled_callbacks_send_nothing(cb, receiver):
    cb.config(callbacks_enabled=False)
    sids = create(cb, receiver, 3)
    time.sleep(0.2)

    assert cb.stats()["callbacks"]["pending"] == 0
    assert receiver.seen() == []
    assert cb.client().messages(sids[0]).fetch().status == "queued"
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
    time.sleep(0.5)
    assert receiver.seen() == []


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
    ):
        with pytest.raises(urllib.error.HTTPError) as exc:
            cb.config(**bad)
        assert exc.value.code == 400, bad
    config = cb.config(callback_shuffle=True, callback_repeat=2, callback_early_rate=0.5)
    assert (config["callback_shuffle"], config["callback_repeat"], config["callback_early_rate"]) == (
        True,
        2,
        0.5,
    )


def test_flags_and_environment(monkeypatch):
    monkeypatch.setenv("SANDBOX_CALLBACK_REPEAT", "2")
    monkeypatch.setenv("SANDBOX_CALLBACKS_ENABLED", "false")
    args = parse_args(
        ["--callback-shuffle", "true", "--callback-drop-rate", "0.25", "--callback-delay-ms", "0"]
    )
    assert args.callback_repeat == 2
    assert args.callbacks_enabled is False
    assert args.callback_shuffle is True
    assert (args.callback_drop_rate, args.callback_delay_ms) == (0.25, 0.0)
    with pytest.raises(SystemExit):
        parse_args(["--callback-shuffle", "perhaps"])
