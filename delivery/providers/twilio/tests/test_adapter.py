"""TwilioAdapter against the sandbox provider running as a real separate process (HTTP over TCP)."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from delivery.providers import ProviderQueryError, get_adapter
from delivery.providers.base import ErrorClass, Outcome, Scope, Submission
from delivery.providers.twilio.adapter import TwilioAdapter, parse_retry_after, redact, rewrite_url
from tests.sandbox_process import SandboxProcess, unused_port

FROM = "+15005550006"
SERVICE = "MG" + "a" * 32


def sub(to: str, body: str = "hello", i: int = 0, **kwargs) -> Submission:
    kwargs.setdefault("sender", FROM)
    return Submission(message_id=i, to=to, body=body, **kwargs)


def test_get_adapter_is_cached_per_process(twilio_settings):
    get_adapter.cache_clear()
    try:
        first = get_adapter()
        assert isinstance(first, TwilioAdapter)
        assert first.name == "twilio"
        assert get_adapter() is first
    finally:
        get_adapter.cache_clear()


def test_unknown_provider_is_a_configuration_error(settings):
    from django.core.exceptions import ImproperlyConfigured

    get_adapter.cache_clear()
    settings.SMSGW_PROVIDER = "carrier-pigeon"
    with pytest.raises(ImproperlyConfigured):
        get_adapter()


def test_batch_of_300_accepted_with_distinct_sids_and_listed_across_pages(adapter, sandbox):
    to = "+15550100300"
    submissions = [sub(to, f"message {i}", i) for i in range(300)]

    results = adapter.submit_many(submissions)

    assert len(results) == 300
    assert all(r.outcome == Outcome.ACCEPTED for r in results), {r.outcome for r in results}
    sids = [r.provider_message_id for r in results]
    assert len(set(sids)) == 300
    assert all(len(s) == 34 and s.startswith("SM") and s[2:] == s[2:].lower() for s in sids)
    assert all(r.provider_status == "queued" and r.http_status == 201 for r in results)
    assert all(r.latency_ms > 0 for r in results)
    requested_at = results[0].response.pop("requested_at")
    assert results[0].response == {
        "http_status": 201,
        "sid": sids[0],
        "status": "queued",
        "num_segments": "1",
    }
    assert abs(requested_at - time.time()) < 60, "when the request left, in epoch seconds"

    listed = sandbox.list_messages(to=to)  # default PageSize 50: six pages
    assert len(listed) == 300
    by_sid = {m.sid: m for m in listed}
    assert set(by_sid) == set(sids)
    # results are in submission order: result i is the message with body i
    assert all(by_sid[sid].body == f"message {i}" for i, sid in enumerate(sids))
    assert all(m.from_ == FROM and m.to == to for m in listed)
    assert sandbox.stats()["submissions"] == 300


def test_concurrency_is_bounded_and_connections_are_reused_across_batches(adapter, sandbox, settings):
    settings.SEND_CONCURRENCY = 8
    sandbox.config(latency_ms=30)

    first = adapter.submit_many([sub("+15550100401", i=i) for i in range(64)])
    second = adapter.submit_many([sub("+15550100402", i=i) for i in range(64)])

    assert all(r.outcome == Outcome.ACCEPTED for r in first + second)
    stats = sandbox.stats()
    assert 2 <= stats["max_in_flight"] <= 8
    assert stats["connections"] <= 8  # one pool per process, not new connections per batch


def test_results_keep_submission_order_in_a_mixed_batch(adapter, sandbox):
    sandbox.config(
        rules=[
            {"to": "+15550100502", "action": "429"},
            {"to": "+15550100503", "action": "400", "error_code": 21610},
        ]
    )
    results = adapter.submit_many(
        [
            sub("+15550100501", i=1),
            sub("+15550100502", i=2),
            sub("+15550100503", i=3),
            sub("+15550100504", i=4),
        ]
    )
    assert [r.outcome for r in results] == [
        Outcome.ACCEPTED,
        Outcome.TRANSIENT,
        Outcome.REJECTED,
        Outcome.ACCEPTED,
    ]
    assert results[2].error_code == "21610"


def test_429_is_transient_with_retry_after(adapter, sandbox):
    to = "+15550100600"
    sandbox.config(retry_after_seconds=7, rules=[{"to": to, "action": "429", "times": 1}])

    [result] = adapter.submit_many([sub(to)])

    assert result.outcome == Outcome.TRANSIENT
    assert result.error_class == ErrorClass.THROTTLED
    assert result.http_status == 429
    assert result.retry_after == 7.0
    assert result.error_code == "20429"
    assert sandbox.stats()["submissions"] == 0
    # the rule was for one request only: the retry goes through
    [retry] = adapter.submit_many([sub(to)])
    assert retry.outcome == Outcome.ACCEPTED
    stats = sandbox.stats()
    assert stats["submissions"] == 1
    assert stats["by_outcome"]["error_429"] == 1


@pytest.mark.parametrize(("action", "code"), [("500", "20500"), ("503", "20503")])
def test_5xx_is_uncertain_never_a_blind_retry(adapter, sandbox, action, code):
    # Twilio documents no "not processed" for a 5xx: a 500 retried "it is possible for a customer to
    # receive multiple messages" (https://www.twilio.com/docs/api/errors/20500). Looked up first.
    to = "+15550100700"
    sandbox.config(rules=[{"to": to, "action": action}])

    [result] = adapter.submit_many([sub(to)])

    assert result.outcome == Outcome.UNCERTAIN
    assert result.http_status == int(action)
    assert result.error_code == code
    assert result.error_class == ErrorClass.TRANSIENT  # what to do once reconciliation finds it absent
    assert result.retry_after is None
    assert sandbox.stats()["submissions"] == 0


@pytest.mark.parametrize(
    ("code", "outcome", "cls", "scope"),
    [
        (21611, Outcome.TRANSIENT, ErrorClass.THROTTLED, Scope.SENDER),  # documented: not created
        (63038, Outcome.TRANSIENT, ErrorClass.THROTTLED, Scope.ACCOUNT),
        (30022, Outcome.TRANSIENT, ErrorClass.THROTTLED, Scope.SENDER),
        (30023, Outcome.TRANSIENT, ErrorClass.THROTTLED, Scope.SENDER),
        (14107, Outcome.TRANSIENT, ErrorClass.THROTTLED, None),
        (30500, Outcome.TRANSIENT, ErrorClass.TRANSIENT, None),
        (21705, Outcome.REJECTED, ErrorClass.ACCOUNT_FAULT, Scope.SENDER),
        (21659, Outcome.REJECTED, ErrorClass.ACCOUNT_FAULT, Scope.SENDER),
        (21660, Outcome.REJECTED, ErrorClass.ACCOUNT_FAULT, Scope.SENDER),
        (21661, Outcome.REJECTED, ErrorClass.ACCOUNT_FAULT, Scope.SENDER),
        (20404, Outcome.REJECTED, ErrorClass.ACCOUNT_FAULT, Scope.ACCOUNT),
        (29999, Outcome.REJECTED, ErrorClass.PERMANENT, None),  # an unknown code in a 4xx
    ],
)
def test_4xx_codes_at_submission(adapter, sandbox, code, outcome, cls, scope):
    to = "+15550100750"
    sandbox.config(rules=[{"to": to, "action": "400", "error_code": code}])

    [result] = adapter.submit_many([sub(to)])

    assert (result.outcome, result.error_class, result.scope) == (outcome, cls, scope)
    assert result.error_code == str(code) and result.http_status == 400
    assert sandbox.stats()["submissions"] == 0


def test_a_wrong_base_url_answers_404_and_holds_the_account(adapter, sandbox, settings):
    # "sending the request to the wrong host or base URL" (https://www.twilio.com/docs/api/errors/20404):
    # the account's configuration, not the message.
    settings.TWILIO_API_BASE_URL = sandbox.base_url + "/not-twilio"

    [result] = adapter.submit_many([sub("+15550100760")])

    assert result.outcome == Outcome.REJECTED and result.http_status == 404
    assert (result.error_class, result.scope) == (ErrorClass.ACCOUNT_FAULT, Scope.ACCOUNT)
    assert sandbox.stats()["submissions"] == 0


@contextlib.contextmanager
def answering(status: int, code: int | None):
    """A stand-in API that answers every request with ``status`` (and a Twilio-shaped body when ``code``):
    statuses the sandbox has no switch for."""
    body = json.dumps({"code": code, "message": "injected", "status": status}).encode() if code else b"oops"

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if code else "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("status", "code", "outcome", "cls"),
    [
        (500, 20500, Outcome.UNCERTAIN, ErrorClass.TRANSIENT),
        (502, None, Outcome.UNCERTAIN, ErrorClass.TRANSIENT),
        (504, None, Outcome.UNCERTAIN, ErrorClass.TRANSIENT),
        (520, None, Outcome.UNCERTAIN, ErrorClass.TRANSIENT),  # an unknown 5xx
        (599, 29998, Outcome.UNCERTAIN, ErrorClass.TRANSIENT),  # an unknown code in a 5xx
        (408, None, Outcome.UNCERTAIN, ErrorClass.TRANSIENT),  # no "not processed" documented either
        (429, 20429, Outcome.TRANSIENT, ErrorClass.THROTTLED),
        (429, None, Outcome.TRANSIENT, ErrorClass.THROTTLED),
        (418, None, Outcome.REJECTED, ErrorClass.PERMANENT),  # an unknown 4xx
        (422, 29997, Outcome.REJECTED, ErrorClass.PERMANENT),
    ],
)
def test_error_answers_by_http_status(adapter, settings, status, code, outcome, cls):
    with answering(status, code) as base_url:
        settings.TWILIO_API_BASE_URL = base_url
        [result] = adapter.submit_many([sub("+15550100770")])

    assert (result.outcome, result.error_class, result.http_status) == (outcome, cls, status)
    assert result.error_code == (str(code) if code else "")


def test_400_is_rejected_with_twilio_error_code_and_redacted(adapter, sandbox):
    to = "+15550100800"
    sandbox.config(rules=[{"to": to, "action": "400"}])

    [result] = adapter.submit_many([sub(to)])

    assert result.outcome == Outcome.REJECTED
    assert result.error_class == ErrorClass.PERMANENT
    assert result.http_status == 400
    assert result.error_code == "21211"
    assert result.response["error_code"] == "21211"
    assert "15550100800" not in repr(result)
    assert sandbox.stats()["submissions"] == 0


def test_real_validation_errors_are_rejected(adapter, sandbox):
    results = adapter.submit_many(
        [
            sub("not-a-number", i=1),
            Submission(message_id=2, to="+15550100900", body="no sender"),
            sub("+15550100901", body="", i=3),
        ]
    )
    assert [(r.outcome, r.error_code) for r in results] == [
        (Outcome.REJECTED, "21211"),
        (Outcome.REJECTED, "21603"),
        (Outcome.REJECTED, "21602"),
    ]


def test_messaging_service_submission_is_accepted(adapter, sandbox):
    sandbox.config(service_assign_delay_ms=60_000)  # the service has not picked a sender yet
    [result] = adapter.submit_many([sub("+15550101000", sender="", sender_pool=SERVICE)])
    assert result.outcome == Outcome.ACCEPTED
    assert result.provider_status == "accepted"
    assert adapter.normalize_status(result.provider_status) == "queued"
    [listed] = sandbox.list_messages(to="+15550101000")
    assert listed.messaging_service_sid == SERVICE
    assert listed.from_ is None


def test_an_accepted_answer_gives_its_sid_status_and_segments_as_twilio_wrote_them(adapter, sandbox):
    """The adapter reads Twilio's JSON answer itself (the SDK's request API, not a MessageInstance): the
    sid, the status and num_segments (a string in Twilio's answer) reach the result, and the message the
    sandbox stored is the one the form described."""
    body = "x" * 200  # GSM-7 over 160 characters: 2 segments
    [result] = adapter.submit_many([sub("+15550102000", body=body)])

    assert result.outcome == Outcome.ACCEPTED
    assert result.provider_message_id.startswith("SM") and result.provider_status == "queued"
    assert result.response["sid"] == result.provider_message_id
    assert result.response["status"] == "queued"
    assert result.response["num_segments"] == "2"
    [listed] = sandbox.list_messages(to="+15550102000")
    assert (listed.sid, listed.body, listed.from_) == (result.provider_message_id, body, FROM)


def test_wrong_auth_token_is_rejected(adapter, sandbox, settings):
    settings.TWILIO_AUTH_TOKEN = "not-the-token"

    [result] = adapter.submit_many([sub("+15550101100")])

    assert result.outcome == Outcome.REJECTED
    assert (result.error_class, result.scope) == (ErrorClass.ACCOUNT_FAULT, Scope.ACCOUNT)
    assert result.http_status == 401
    assert result.error_code == "20003"
    stats = sandbox.stats()
    assert stats["submissions"] == 0
    assert stats["by_outcome"]["unauthorized"] == 1


def test_server_that_stores_nothing_and_hangs_is_uncertain(adapter, sandbox, settings):
    # The client cannot tell "never stored" from "stored, answer lost": both are UNCERTAIN.
    settings.TWILIO_TIMEOUT_SECONDS = 1.0
    to = "+15550101200"
    sandbox.config(timeout_hang_seconds=5, rules=[{"to": to, "action": "timeout", "times": 1}])

    started = time.monotonic()
    [result] = adapter.submit_many([sub(to)])

    assert result.outcome == Outcome.UNCERTAIN
    assert result.http_status is None
    assert result.response["request_sent"] is True
    assert 900 <= result.latency_ms < 4000
    assert time.monotonic() - started < 4
    assert sandbox.stats()["submissions"] == 0


def test_unused_port_is_transient(adapter, settings):
    settings.TWILIO_API_BASE_URL = f"http://127.0.0.1:{unused_port()}"

    results = adapter.submit_many([sub("+15550101300", i=i) for i in range(3)])

    assert [r.outcome for r in results] == [Outcome.TRANSIENT] * 3
    assert all(r.response["request_sent"] is False for r in results)
    assert all(r.response["exception"] == "ClientConnectorError" for r in results)


def test_stopped_sandbox_is_transient(twilio_settings, settings):
    get_adapter.cache_clear()
    adapter = get_adapter()
    with SandboxProcess() as other:
        settings.TWILIO_API_BASE_URL = other.base_url
        [before] = adapter.submit_many([sub("+15550101400")])
        assert before.outcome == Outcome.ACCEPTED  # a pooled keep-alive connection now exists
    time.sleep(0.2)  # the server closed it; the adapter's loop notices
    [after] = adapter.submit_many([sub("+15550101400")])
    assert after.outcome == Outcome.TRANSIENT
    get_adapter.cache_clear()


def test_accept_then_hang_is_uncertain_and_reconciles(adapter, sandbox, settings):
    settings.TWILIO_TIMEOUT_SECONDS = 1.0
    to = "+15550101500"
    since = datetime.now(UTC) - timedelta(seconds=2)
    # an older message to the same number and one from another sender must not be returned
    [other_sender] = adapter.submit_many([sub(to, "other sender", sender="+15005550009")])
    assert other_sender.outcome == Outcome.ACCEPTED
    # Twilio queues it for a while (a slow sender): the listing must still find it, unsent.
    sandbox.config(
        timeout_hang_seconds=5,
        queue_delay_ms=60_000,
        rules=[{"to": to, "action": "accept_then_hang", "times": 1}],
    )

    [result] = adapter.submit_many([sub(to, "the uncertain one")])

    assert result.outcome == Outcome.UNCERTAIN
    assert result.provider_message_id == ""
    assert sandbox.stats()["submissions"] == 2

    window = {"created_after": since, "created_before": datetime.now(UTC) + timedelta(seconds=5)}
    lookup = adapter.find_submissions(to=to, sender=FROM, sender_pool="", **window)
    assert lookup.complete and lookup.pages == 1 and lookup.scanned == 2
    assert len(lookup.candidates) == 1
    [message] = lookup.candidates
    assert message.body == "the uncertain one"
    assert message.to == to and message.from_number == FROM
    assert message.provider_message_id.startswith("SM")
    assert message.date_created is not None and message.date_created >= since.replace(microsecond=0)
    assert adapter.normalize_status(message.status) == "queued"

    fetched = adapter.fetch(message.provider_message_id)
    assert fetched == message

    # a window that starts later excludes it
    later = datetime.now(UTC) + timedelta(minutes=5)
    assert (
        adapter.find_submissions(
            to=to, sender=FROM, sender_pool="", created_after=later, created_before=later
        ).candidates
        == []
    )


def test_find_submissions_by_messaging_service(adapter, sandbox):
    to = "+15550101600"
    since = datetime.now(UTC) - timedelta(seconds=2)
    results = adapter.submit_many(
        [
            sub(to, "mine", sender="", sender_pool=SERVICE),
            sub(to, "other service", sender="", sender_pool="MG" + "b" * 32),
            sub(to, "direct"),
        ]
    )
    assert all(r.outcome == Outcome.ACCEPTED for r in results)

    found = adapter.find_submissions(
        to=to,
        sender="",
        sender_pool=SERVICE,
        created_after=since,
        created_before=datetime.now(UTC) + timedelta(seconds=5),
    ).candidates

    assert [m.body for m in found] == ["mine"]
    assert found[0].provider_message_id == results[0].provider_message_id


def test_find_submissions_converts_aware_since_to_utc(adapter, sandbox):
    to = "+15550101700"
    new_york = ZoneInfo("America/New_York")
    [result] = adapter.submit_many([sub(to)])
    assert result.outcome == Outcome.ACCEPTED

    just_before = (datetime.now(UTC) - timedelta(seconds=5)).astimezone(new_york)
    just_after = (datetime.now(UTC) + timedelta(seconds=5)).astimezone(new_york)
    one_hour_later = (datetime.now(UTC) + timedelta(hours=1)).astimezone(new_york)
    found = adapter.find_submissions(
        to=to,
        sender=FROM,
        sender_pool="",
        created_after=just_before,
        created_before=just_after,
    ).candidates
    assert [m.provider_message_id for m in found] == [result.provider_message_id]
    later = adapter.find_submissions(
        to=to,
        sender=FROM,
        sender_pool="",
        created_after=one_hour_later,
        created_before=one_hour_later + timedelta(hours=1),
    )
    assert later.candidates == []


def test_fetch_unknown_sid_is_none(adapter, sandbox):
    assert adapter.fetch("SM" + "0" * 32) is None


def test_lookups_raise_provider_query_error_when_unreachable(adapter, settings):
    settings.TWILIO_API_BASE_URL = f"http://127.0.0.1:{unused_port()}"
    with pytest.raises(ProviderQueryError):
        adapter.fetch("SM" + "0" * 32)
    with pytest.raises(ProviderQueryError):
        adapter.find_submissions(
            to="+15550101800",
            sender=FROM,
            sender_pool="",
            created_after=datetime.now(UTC),
            created_before=datetime.now(UTC),
        )


def test_empty_batch(adapter):
    assert adapter.submit_many([]) == []


@pytest.mark.parametrize(
    ("raw", "ours"),
    [
        ("accepted", "queued"),
        ("queued", "queued"),
        ("scheduled", "queued"),
        ("sending", "sending"),
        ("sent", "sent"),
        ("delivered", "delivered"),
        ("undelivered", "undelivered"),
        ("failed", "failed"),
        ("canceled", "canceled"),
        ("read", "delivered"),
        ("partially_delivered", "undelivered"),
        ("receiving", "inbound"),
        ("received", "inbound"),
        ("teleported", ""),
        ("", ""),
    ],
)
def test_normalize_status(raw, ours):
    assert TwilioAdapter().normalize_status(raw) == ours


def test_validate_callback(settings):
    from twilio.request_validator import RequestValidator

    settings.TWILIO_AUTH_TOKEN = "callback-token"
    url = "https://smsgw.example.com/callbacks/twilio/status"
    params = {"MessageSid": "SM" + "1" * 32, "MessageStatus": "delivered"}
    signature = RequestValidator("callback-token").compute_signature(url, params)
    adapter = TwilioAdapter()

    headers = {"X-Twilio-Signature": signature}
    assert adapter.validate_callback(url, params, headers) is True
    assert adapter.validate_callback(url, {**params, "MessageStatus": "failed"}, headers) is False
    assert adapter.validate_callback(url, params, {}) is False


def test_helpers():
    assert (
        rewrite_url("https://api.twilio.com/2010-04-01/x.json", "http://h:1")
        == "http://h:1/2010-04-01/x.json"
    )
    assert rewrite_url("https://api.twilio.com.evil/x", "http://h:1") == "https://api.twilio.com.evil/x"
    assert rewrite_url("https://messaging.twilio.com/v1", "http://h:1") == "https://messaging.twilio.com/v1"
    assert parse_retry_after("12") == 12.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None
    assert redact("The 'To' number +15550101900 is not valid") == "The 'To' number ***00 is not valid"
