"""Answers that leave a submission uncertain, on a real sandbox process: a message stored and then
answered 500/20500 or 503/20503, or stored with its answer dropped; a Messages list that lags; and the
Twilio fidelity around them (the default ``messaging_service_sid`` of a From send, 21624 for a bad
``ValidityPeriod``). Sources: docs/twilio.md, "Fidelity"."""

from __future__ import annotations

import base64
import http.client
import re
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from twilio.base.exceptions import TwilioRestException

from delivery.providers.twilio.sandbox.server import SandboxState
from delivery.providers.twilio.tests.test_sandbox_callbacks import Receiver, wait_callbacks, wait_for
from delivery.providers.twilio.tests.test_sandbox_fidelity import raw_request
from tests.sandbox_process import SandboxProcess

FROM = "+15005550006"
SERVICE = "MG" + "d" * 32
MG_SID = re.compile(r"MG[0-9a-f]{32}")


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


def create_form(to: str, receiver: Receiver | None = None, **extra: str) -> dict:
    form = {"To": to, "From": FROM, "Body": f"body for {to}", **extra}
    if receiver is not None:
        form["StatusCallback"] = receiver.url()
    return form


def post_without_answer(sandbox, form: dict) -> BaseException:
    """POST a create whose connection is expected to close without an answer; returns the error."""
    credentials = base64.b64encode(f"{sandbox.account_sid}:{sandbox.auth_token}".encode()).decode()
    request = urllib.request.Request(
        f"{sandbox.base_url}/2010-04-01/Accounts/{sandbox.account_sid}/Messages.json",
        data=urllib.parse.urlencode(form).encode(),
        method="POST",
        headers={"Authorization": f"Basic {credentials}"},
    )
    with pytest.raises((http.client.HTTPException, ConnectionError, urllib.error.URLError)) as exc:
        urllib.request.urlopen(request, timeout=10)
    return exc.value


@pytest.mark.parametrize(
    ("action", "status", "code", "message"),
    [
        ("store_then_500", 500, 20500, "An internal server error has occurred"),
        ("store_then_503", 503, 20503, "Service unavailable"),
    ],
)
def test_a_stored_message_answered_5xx_is_listed_fetched_sent_and_called_back(
    sb, receiver, action, status, code, message
):
    to = "+15550900001"
    sb.config(rules=[{"to": to, "action": action, "times": 1}])
    answer, body, _ = raw_request(sb, "POST", "/Messages.json", create_form(to, receiver))
    assert (answer, body["code"], body["status"], body["message"]) == (status, code, status, message)
    assert body["more_info"] == f"https://www.twilio.com/docs/errors/{code}"
    assert "sid" not in body

    client = sb.client()
    listed = client.messages.list(to=to)
    assert [m.body for m in listed] == [f"body for {to}"]
    sid = listed[0].sid
    wait_callbacks(sb)
    assert receiver.statuses() == {sid: ["sent", "delivered"]}
    assert client.messages(sid).fetch().status == "delivered"

    again, _, _ = raw_request(sb, "POST", "/Messages.json", create_form(to))  # the rule is used up
    assert again == 201
    stats = sb.stats()
    assert stats["submissions"] == 2
    assert stats["by_outcome"][action] == 1 and stats["by_outcome"]["accepted"] == 1
    assert stats["rejections"] == {str(code): 1}


def test_store_then_5xx_rates_store_every_faulted_submission(sb):
    sb.config(store_then_500_rate=0.5, store_then_503_rate=0.5)
    client = sb.client()
    answers = []
    for i in range(20):
        with pytest.raises(TwilioRestException) as exc:
            client.messages.create(to=f"+155509010{i:02d}", from_=FROM, body=f"r{i}")
        answers.append((exc.value.status, exc.value.code))
    assert set(answers) <= {(500, 20500), (503, 20503)}
    stats = sb.stats()
    assert stats["submissions"] == 20  # every one of them stored
    assert stats["by_outcome"]["store_then_500"] == answers.count((500, 20500))
    assert stats["by_outcome"]["store_then_503"] == answers.count((503, 20503))
    assert sorted(m.body for m in client.messages.list()) == sorted(f"r{i}" for i in range(20))

    with pytest.raises(urllib.error.HTTPError) as exc:  # the rates are shares of one draw: at most 1
        sb.config(store_then_drop_rate=0.1)
    assert exc.value.code == 400


def test_an_answer_dropped_after_storing_leaves_the_message_in_place(sb, receiver):
    to = "+15550900002"
    sb.config(rules=[{"to": to, "action": "store_then_drop", "times": 1}])
    post_without_answer(sb, create_form(to, receiver))

    client = sb.client()
    listed = client.messages.list(to=to)
    assert [m.body for m in listed] == [f"body for {to}"]
    wait_callbacks(sb)
    assert receiver.statuses() == {listed[0].sid: ["sent", "delivered"]}
    stats = sb.stats()
    assert stats["submissions"] == 1 and stats["by_outcome"]["store_then_drop"] == 1
    assert stats["rejections"] == {}  # nothing was answered

    sb.config(store_then_drop_rate=1.0)
    post_without_answer(sb, create_form("+15550900003"))
    assert [m.to for m in client.messages.list(to="+15550900003")] == ["+15550900003"]


def test_list_lag_hides_young_messages_from_the_list_only(sb):
    client = sb.client()
    first = client.messages.create(to="+15550900004", from_=FROM, body="first")
    assert [m.sid for m in client.messages.list(to="+15550900004")] == [first.sid]  # default 0: at once

    sb.config(list_lag_seconds=3600)
    assert client.messages.list(to="+15550900004") == []  # younger than the lag: hidden now
    before_young = time.monotonic()
    young = client.messages.create(to="+15550900004", from_=FROM, body="young")
    assert client.messages.list(to="+15550900004") == [] and client.messages.list() == []
    assert client.messages(young.sid).fetch().body == "young"  # a fetch by sid sees it at once

    sb.config(list_lag_seconds=2)

    def both_listed_none_early() -> bool:
        sids = [m.sid for m in client.messages.list(to="+15550900004")]
        if young.sid in sids:  # listed only once at least 2 s old (its age here is at most this)
            assert time.monotonic() - before_young >= 2.0, "a message listed before the lag passed"
        return sorted(sids) == sorted([first.sid, young.sid])

    assert wait_for(both_listed_none_early, what="both listed once older than the lag")
    assert sb.stats()["submissions"] == 2


def test_a_from_send_shows_the_accounts_default_messaging_service(sb):
    client = sb.client()
    plain = client.messages.create(to="+15550900005", from_=FROM, body="x")
    default = plain.messaging_service_sid
    assert MG_SID.fullmatch(default)
    assert client.messages(plain.sid).fetch().messaging_service_sid == default
    assert [m.messaging_service_sid for m in client.messages.list(to="+15550900005")] == [default]
    other = client.messages.create(to="+15550900006", from_="+15005550007", body="x")
    assert other.messaging_service_sid == default  # one default service per account

    service = client.messages.create(to="+15550900007", messaging_service_sid=SERVICE, body="x")
    both = client.messages.create(to="+15550900008", from_=FROM, messaging_service_sid=SERVICE, body="x")
    assert service.messaging_service_sid == both.messaging_service_sid == SERVICE != default

    sb.config(default_messaging_service=False)
    assert client.messages(plain.sid).fetch().messaging_service_sid is None
    assert client.messages(service.sid).fetch().messaging_service_sid == SERVICE

    with SandboxProcess(account_sid="AC" + "1" * 32) as elsewhere:
        created = elsewhere.client().messages.create(to="+15550900009", from_=FROM, body="x")
        assert MG_SID.fullmatch(created.messaging_service_sid) and created.messaging_service_sid != default


def test_a_validity_period_out_of_range_is_21624(sb):
    for bad in ("0", "36001"):
        status, body, _ = raw_request(
            sb, "POST", "/Messages.json", create_form("+15550900010", ValidityPeriod=bad)
        )
        assert (status, body["code"], body["message"]) == (400, 21624, "Invalid validity period value")
    ok, body, _ = raw_request(
        sb, "POST", "/Messages.json", create_form("+15550900010", ValidityPeriod="36000")
    )
    assert ok == 201
    assert sb.message_info(body["sid"])["validity_period"] == 36000
    assert sb.stats()["rejections"] == {"21624": 2}


def test_the_new_switches_are_flags_too():
    args = [
        "--store-then-500-rate",
        "0.25",
        "--store-then-503-rate",
        "0.25",
        "--store-then-drop-rate",
        "0.5",
        "--list-lag-seconds",
        "120",
        "--default-messaging-service",
        "false",
        "--rules",
        '[{"to": "+15550900011", "action": "store_then_503"}]',
    ]
    with SandboxProcess(extra_args=args) as process:
        config = process.config()
        assert (config["store_then_500_rate"], config["store_then_503_rate"]) == (0.25, 0.25)
        assert (config["store_then_drop_rate"], config["list_lag_seconds"]) == (0.5, 120.0)
        assert config["default_messaging_service"] is False
        status, body, _ = raw_request(process, "POST", "/Messages.json", create_form("+15550900011"))
        assert (status, body["code"]) == (503, 20503)
        process.config(list_lag_seconds=0)
        assert [m["to"] for m in process.messages_json()] == ["+15550900011"]


def test_list_lag_holds_for_every_page_of_one_listing():
    now = [1000.0]
    state = SandboxState(clock=lambda: now[0])
    for i in range(5):
        now[0] = 1000.0 + i
        state.store("+15550900012", FROM, f"m{i}", "", "")
    state.set_config(state.config.updated({"list_lag_seconds": 2.5}))
    now[0] = 1005.0  # m0, m1 and m2 are 2.5 s old or more
    first, token, _ = state.query(
        to="+15550900012", from_=None, lo=None, hi=None, page=0, page_size=2, token=None
    )
    now[0] = 1100.0  # the next page is cut from the same snapshot: m3 and m4 stay out of this listing
    second, end, _ = state.query(
        to="+15550900012", from_=None, lo=None, hi=None, page=1, page_size=2, token=token
    )
    assert [m.body for m in first + second] == ["m2", "m1", "m0"] and end is None
    fresh, _, _ = state.query(
        to="+15550900012", from_=None, lo=None, hi=None, page=0, page_size=10, token=None
    )
    assert [m.body for m in fresh] == ["m4", "m3", "m2", "m1", "m0"]
