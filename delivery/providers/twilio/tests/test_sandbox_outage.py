"""Outages of the sandbox's Twilio API (``outage``: ``503`` answers, ``refuse`` closes the API port) and
the separate control listener (``--control-port``) that stays up through them, on real processes."""

from __future__ import annotations

import http.client
import socket
import time
import urllib.error
from urllib.parse import urlsplit

import pytest
import requests
from twilio.base.exceptions import TwilioRestException

from delivery.providers.twilio.tests.test_sandbox_callbacks import Receiver, wait_callbacks, wait_for
from delivery.providers.twilio.tests.test_sandbox_fidelity import raw_request
from tests.sandbox_process import SandboxProcess

FROM = "+15005550006"


@pytest.fixture(scope="module")
def controlled():
    """A sandbox with a control listener of its own (any free port)."""
    with SandboxProcess(control_port=0) as process:
        yield process


@pytest.fixture
def sb(controlled):
    controlled.reset()
    yield controlled
    controlled.reset()  # back to outage "none", whatever the test left


@pytest.fixture
def receiver():
    r = Receiver()
    r.thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


def client_of(sandbox):
    """The SDK client, with a timeout: a test here fails, it never hangs."""
    client = sandbox.client()
    client.http_client.timeout = 10
    return client


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname, parts.port


def connect_error(url: str) -> type[BaseException] | None:
    """The error a fresh TCP connect to ``url``'s port ends with, or None when it connects."""
    try:
        with socket.create_connection(address(url), timeout=2):
            return None
    except OSError as exc:
        return type(exc)


def test_the_control_listener_is_announced_and_used(sb):
    assert sb.control_url != sb.base_url
    assert address(sb.control_url)[0] == address(sb.base_url)[0]
    assert sb.banner == f"sandbox listening on {sb.base_url} control {sb.control_url}"
    assert sb.stats()["submissions"] == 0  # through the control listener
    # the control API is still on the main port as well
    assert raw_request(sb, "GET", ".json")[0] == 200
    sb.control_url, main_control = sb.base_url, sb.control_url
    try:
        assert sb.config()["outage"] == "none"
    finally:
        sb.control_url = main_control


def test_without_a_control_port_the_first_line_is_unchanged(sandbox):
    assert sandbox.control_url == sandbox.base_url
    assert sandbox.banner == f"sandbox listening on {sandbox.base_url}"
    with pytest.raises(urllib.error.HTTPError) as exc:  # nothing could switch it back on
        sandbox.config(outage="refuse")
    assert exc.value.code == 400
    assert sandbox.config()["outage"] == "none"


def test_outage_503_answers_every_twilio_call_at_once_and_stores_nothing(sb):
    client = client_of(sb)
    kept = client.messages.create(to="+15550950001", from_=FROM, body="before")
    sb.config(outage="503")
    calls = [
        ("POST", "/Messages.json", {"To": "+15550950002", "From": FROM, "Body": "x"}),
        ("GET", f"/Messages/{kept.sid}.json", None),
        ("GET", "/Messages.json", None),
        ("GET", ".json", None),
    ]
    for method, path, form in calls:
        started = time.monotonic()
        status, body, _ = raw_request(sb, method, path, form)
        assert time.monotonic() - started < 1.0
        assert (status, body["code"], body["message"], body["status"]) == (
            503,
            20503,
            "Service unavailable",
            503,
        )
        assert body["more_info"].endswith("/20503")
    with pytest.raises(TwilioRestException) as exc:  # what the SDK sees
        client.messages.create(to="+15550950003", from_=FROM, body="x")
    assert (exc.value.status, exc.value.code) == (503, 20503)

    stats = sb.stats()
    assert stats["submissions"] == 1
    assert stats["by_outcome"]["outage_503"] == 5
    assert stats["rejections"] == {"20503": 2}  # the two creates

    sb.config(outage="none")
    assert [m.sid for m in client.messages.list()] == [kept.sid]
    assert client.messages.create(to="+15550950004", from_=FROM, body="after").status == "queued"


def test_outage_refuse_closes_the_api_port_and_reopens_it_on_the_same_port(sb):
    client = client_of(sb)
    before = client.messages.create(to="+15550960001", from_=FROM, body="before")
    assert connect_error(sb.base_url) is None

    sb.config(outage="refuse")
    assert wait_for(lambda: connect_error(sb.base_url), what="refused") is ConnectionRefusedError
    stats = sb.stats()  # the control listener stays up
    assert stats["submissions"] == 1
    assert sb.config()["outage"] == "refuse"
    # the SDK's pooled keep-alive connection was closed too: it reconnects, and is refused
    with pytest.raises(requests.exceptions.ConnectionError, match="Connection refused"):
        client.messages.create(to="+15550960002", from_=FROM, body="lost")

    sb.config(outage="none")
    assert connect_error(sb.base_url) is None  # open again before the config call answered
    after = client.messages.create(to="+15550960003", from_=FROM, body="after")  # same base_url
    assert after.status == "queued"
    assert {m.sid for m in client.messages.list()} == {before.sid, after.sid}
    stats = sb.stats()
    assert stats["submissions"] == 2 and stats["by_outcome"]["accepted"] == 2


def test_refuse_then_503_then_none(sb):
    sb.config(outage="refuse")
    assert wait_for(lambda: connect_error(sb.base_url), what="refused") is ConnectionRefusedError
    sb.config(outage="503")  # listening again, answering 503
    assert raw_request(sb, "GET", ".json")[0] == 503
    sb.config(outage="none")
    assert raw_request(sb, "GET", ".json")[0] == 200


def test_refuse_closes_idle_keep_alive_connections(sb):
    host, port = address(sb.base_url)
    connection = http.client.HTTPConnection(host, port, timeout=5)
    try:
        connection.request("GET", "/_sandbox/health")
        response = connection.getresponse()
        assert response.status == 200 and response.getheader("Connection", "keep-alive") != "close"
        response.read()

        sb.config(outage="refuse")

        def closed() -> bool:
            try:
                connection.request("GET", "/_sandbox/health")
                connection.getresponse().read()
            except (ConnectionError, http.client.HTTPException):
                return True  # closed by the sandbox (a read timeout is no answer: it fails the test)
            return False

        assert closed()  # the old connection was closed, and reconnecting is refused
        assert connect_error(sb.base_url) is ConnectionRefusedError
    finally:
        connection.close()


def test_reset_reopens_the_api_port(sb):
    sb.config(outage="refuse", latency_ms=5)
    assert wait_for(lambda: connect_error(sb.base_url), what="refused") is ConnectionRefusedError
    sb.reset()  # back to the start config: outage "none"
    assert sb.config()["outage"] == "none"
    assert connect_error(sb.base_url) is None


def test_callbacks_already_scheduled_go_out_while_refusing(sb, receiver):
    sb.config(queue_delay_ms=300, callback_delay_ms=0, callback_gap_ms=100)
    client = client_of(sb)
    sids = [
        client.messages.create(
            to=f"+155509700{i:02d}", from_=FROM, body="x", status_callback=receiver.url()
        ).sid
        for i in range(3)
    ]
    sb.config(outage="refuse")
    assert connect_error(sb.base_url) is ConnectionRefusedError
    assert receiver.seen() == []  # nothing was due yet when the port closed
    wait_callbacks(sb)
    assert receiver.statuses() == {sid: ["sent", "delivered"] for sid in sids}
    assert sb.config()["outage"] == "refuse"  # all of them went out during the outage
    assert sb.stats()["callbacks"]["sent"] == 6


def test_starting_in_refuse_needs_and_uses_the_control_port():
    with SandboxProcess(control_port=0, extra_args=["--outage", "refuse"]) as process:
        assert connect_error(process.base_url) is ConnectionRefusedError
        assert process.stats()["submissions"] == 0
        process.config(outage="none")
        assert connect_error(process.base_url) is None
        assert raw_request(process, "GET", ".json")[0] == 200
