"""The sandbox provider itself: its Twilio surface through the SDK, its control API, its store."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from twilio.base.exceptions import TwilioException, TwilioRestException

from delivery.providers.base import Outcome, Submission
from delivery.providers.twilio.sandbox.server import SandboxConfig, SandboxState, count_segments, rfc2822

FROM = "+15005550006"


def _raw_fetch(sandbox, sid: str) -> dict:
    credentials = base64.b64encode(f"{sandbox.account_sid}:{sandbox.auth_token}".encode()).decode()
    request = urllib.request.Request(
        f"{sandbox.base_url}/2010-04-01/Accounts/{sandbox.account_sid}/Messages/{sid}.json",
        headers={"Authorization": f"Basic {credentials}"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def wait_for(condition, timeout: float = 10.0, what: str = "condition"):
    """Poll ``condition`` until it returns something truthy, and return it; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_message_resource_is_twilio_shaped_while_queued(sandbox):
    sandbox.reset()
    sandbox.config(queue_delay_ms=60_000)  # it stays in the queue for the whole test
    created = sandbox.client().messages.create(
        to="+15550200001", from_=FROM, body="héllo", status_callback="http://127.0.0.1:1/cb"
    )
    raw = _raw_fetch(sandbox, created.sid)
    assert raw["sid"] == created.sid and len(raw["sid"]) == 34
    assert raw["account_sid"] == sandbox.account_sid
    assert raw["status"] == created.status == "queued"
    assert raw["direction"] == "outbound-api"
    assert raw["api_version"] == "2010-04-01"
    assert raw["num_segments"] == "1"
    assert raw["price"] is None and raw["error_code"] is None and raw["error_message"] is None
    assert raw["from"] == FROM and raw["to"] == "+15550200001" and raw["body"] == "héllo"
    assert raw["uri"] == f"/2010-04-01/Accounts/{sandbox.account_sid}/Messages/{created.sid}.json"
    assert raw["date_created"].endswith(" +0000") and raw["date_sent"] is None  # not sent yet
    assert raw["date_updated"] == raw["date_created"]
    assert set(raw["subresource_uris"]) == {"media", "feedback"}
    assert abs((created.date_created - datetime.now(UTC)).total_seconds()) < 5


def test_a_sent_message_has_date_sent_and_price(sandbox):
    sandbox.reset()
    client = sandbox.client()
    created = client.messages.create(to="+15550200011", from_=FROM, body="x" * 200)  # two segments
    assert created.status == "queued" and created.date_sent is None and created.price is None

    raw = wait_for(
        lambda: (r := _raw_fetch(sandbox, created.sid))["status"] == "delivered" and r, what="delivered"
    )
    assert raw["date_sent"] is not None and raw["date_sent"].endswith(" +0000")
    assert raw["num_segments"] == "2"
    assert (raw["price"], raw["price_unit"]) == ("-0.01580", "USD")
    assert raw["error_code"] is None
    fetched = client.messages(created.sid).fetch()
    assert created.date_created <= fetched.date_sent <= fetched.date_updated


def test_auth_and_account_are_checked(sandbox):
    sandbox.reset()
    bad = sandbox.client()
    bad.password = "wrong"
    bad.auth = (bad.username, "wrong")
    with pytest.raises(TwilioRestException) as wrong_token:
        bad.messages.create(to="+15550200002", from_=FROM, body="x")
    assert (wrong_token.value.status, wrong_token.value.code) == (401, 20003)

    other_account = sandbox.client()
    with pytest.raises(TwilioRestException) as wrong_account:
        other_account.api.v2010.accounts("AC" + "1" * 32).messages.create(
            to="+15550200002", from_=FROM, body="x"
        )
    # Valid credentials on another account's URL: Twilio's 404/20404, not 401 (docs/twilio.md, fidelity)
    assert (wrong_account.value.status, wrong_account.value.code) == (404, 20404)
    assert sandbox.stats()["submissions"] == 0


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"from_": FROM, "body": "x"}, 21604),
        ({"to": "+15550200003", "body": "x"}, 21603),
        ({"to": "+15550200003", "from_": FROM, "body": ""}, 21602),
        ({"to": "12ab", "from_": FROM, "body": "x"}, 21211),
    ],
)
def test_validation_errors(sandbox, kwargs, code):
    sandbox.reset()
    kwargs.setdefault("to", "")
    with pytest.raises(TwilioRestException) as exc:
        sandbox.client().messages.create(**kwargs)
    assert (exc.value.status, exc.value.code) == (400, code)


def test_date_sent_filters(sandbox):
    sandbox.reset()
    client = sandbox.client()
    to = "+15550200004"
    client.messages.create(to=to, from_=FROM, body="x")
    now = datetime.now(UTC)
    today = now.strftime("%Y-%m-%d")
    yesterday = (now - timedelta(days=1)).strftime("%Y-%m-%d")

    def count(**filters):
        return len(client.messages.list(to=to, **filters))

    assert count(date_sent=today) == 1
    assert count(date_sent=now) == 1  # a datetime for DateSent means its day
    assert count(date_sent=yesterday) == 0
    assert count(date_sent_after=now - timedelta(minutes=1)) == 1
    assert count(date_sent_after=now + timedelta(minutes=1)) == 0
    assert count(date_sent_after=today) == 1  # a date means from the start of that day
    assert count(date_sent_before=now + timedelta(minutes=1)) == 1
    assert count(date_sent_before=now - timedelta(minutes=1)) == 0
    assert count(date_sent_before=today) == 1  # on or before that day
    assert count(date_sent_before=yesterday) == 0
    with pytest.raises(TwilioException) as exc:  # the SDK's Page does not raise a TwilioRestException
        count(date_sent_after="not a date")
    assert exc.value.args[1].status_code == 400


def test_list_by_from_and_paging_both_ways(sandbox):
    sandbox.reset()
    client = sandbox.client()
    for i in range(7):
        client.messages.create(to=f"+1555020010{i % 2}", from_=FROM, body=str(i))
    client.messages.create(to="+15550200100", from_="+15005550009", body="other")

    assert [m.body for m in client.messages.list(from_=FROM, page_size=2)] == [
        "6",
        "5",
        "4",
        "3",
        "2",
        "1",
        "0",
    ]
    assert [m.body for m in client.messages.list(from_=FROM, to="+15550200100", page_size=2)] == [
        "6",
        "4",
        "2",
        "0",
    ]
    first = client.messages.page(from_=FROM, page_size=3)
    second = first.next_page()
    assert [m.body for m in second] == ["3", "2", "1"]
    assert [m.body for m in second.previous_page()] == ["6", "5", "4"]
    assert second.next_page().next_page() is None
    assert len(client.messages.list()) == 8


def test_control_api_validates_and_reset_restores_start_config(sandbox):
    sandbox.reset()
    config = sandbox.config(latency_ms=5, rules=[{"to": "+15550200200", "action": "500", "times": 2}])
    assert config["latency_ms"] == 5
    assert config["rules"] == [{"to": "+15550200200", "action": "500", "times": 2}]

    for bad in (
        {"nope": 1},
        {"error_rate_5xx": 1.5},
        {"error_rate_5xx": 0.6, "error_rate_429": 0.6},
        {"rules": [{"to": "+1", "action": "explode"}]},
        {"latency_ms": -1},
    ):
        with pytest.raises(urllib.error.HTTPError) as exc:
            sandbox.config(**bad)
        assert exc.value.code == 400
    assert sandbox.config()["latency_ms"] == 5  # unchanged by the rejected updates

    sandbox.reset()
    assert sandbox.config() == SandboxConfig().to_json()
    assert sandbox.stats()["submissions"] == 0


def test_random_rates_and_stats(sandbox):
    sandbox.reset()
    sandbox.config(error_rate_5xx=0.25, error_rate_429=0.25)
    client = sandbox.client()
    statuses = []
    for i in range(200):
        try:
            client.messages.create(to=f"+1555030{i:04d}", from_=FROM, body="x")
            statuses.append(201)
        except TwilioRestException as exc:
            statuses.append(exc.status)
    stats = sandbox.stats()
    outcomes = stats["by_outcome"]
    assert statuses.count(201) == stats["submissions"] == outcomes["accepted"]
    assert statuses.count(429) == outcomes["error_429"]
    assert statuses.count(500) + statuses.count(503) == outcomes["error_500"] + outcomes["error_503"]
    assert 60 <= stats["submissions"] <= 140
    assert 20 <= outcomes["error_429"] <= 80


def test_latency_is_added_without_blocking_other_requests(adapter, sandbox):
    sandbox.config(latency_ms=300)
    started = time.monotonic()
    results = adapter.submit_many([Submission(i, f"+1555040{i:04d}", "x", sender=FROM) for i in range(40)])
    elapsed = time.monotonic() - started
    assert all(r.outcome == Outcome.ACCEPTED for r in results)
    assert all(r.latency_ms >= 290 for r in results)
    # 40 x 300 ms one after another would take 12 s; concurrently, about 0.3 s (a loaded machine adds
    # seconds at worst, never the 11.7 s that serial handling would).
    assert elapsed < 6.0, elapsed


def test_store_lists_50k_by_to_efficiently():
    state = SandboxState()
    hot = "+15550500000"
    for i in range(60_000):
        state.store(hot if i % 6 else f"+1555051{i:04d}", FROM, f"m{i}", "", "")
    started = time.perf_counter()
    seen, token = [], None
    while True:
        items, token, _ = state.query(
            to=hot, from_=None, lo=None, hi=None, page=0, page_size=1000, token=token
        )
        seen.extend(items)
        if token is None:
            break
    elapsed = time.perf_counter() - started
    assert len(seen) == 50_000 == len({m.sid for m in seen})
    assert [m.seq for m in seen] == sorted((m.seq for m in seen), reverse=True)
    assert elapsed < 10.0, elapsed  # ~0.3 s here; a scan per page (50 x 60k) would take minutes
    # a rare recipient among 60k is found (through the per-recipient index, see SandboxState.query)
    items, more, _ = state.query(
        to="+15550510006", from_=FROM, lo=None, hi=None, page=0, page_size=50, token=None
    )
    assert [m.body for m in items] == ["m6"] and more is None


def test_helpers():
    assert count_segments("a" * 160) == 1
    assert count_segments("a" * 161) == 2
    assert count_segments("[" * 80) == 1  # extension characters take two septets
    assert count_segments("[" * 81) == 2
    assert count_segments("é" * 160) == 1  # é is in GSM-7
    assert count_segments("ж" * 70) == 1
    assert count_segments("ж" * 71) == 2
    assert rfc2822(0) == "Thu, 01 Jan 1970 00:00:00 +0000"
