"""The Twilio adapter's rules that need no server: the error table, callback parsing and signatures (classic
and SharedKey, checked with the SDK's own validator), body matching, ValidityPeriod and socket options."""

from __future__ import annotations

import socket
import struct
from datetime import UTC, datetime, timedelta

import pytest
from twilio.request_validator import RequestValidator

from delivery.providers.base import (
    CallbackInvalid,
    CallbackKeyUnknown,
    ErrorClass,
    Outcome,
    Scope,
    carrier_minute,
)
from delivery.providers.twilio.callbacks import body_matches, parse, validate
from delivery.providers.twilio.errors import classify, submission_outcome
from delivery.providers.twilio.http import abortable_socket_factory
from delivery.sending.worker import validity_period

C = ErrorClass


@pytest.mark.parametrize(
    ("code", "http", "cls", "scope"),
    [
        ("20003", 401, C.ACCOUNT_FAULT, Scope.ACCOUNT),
        ("20429", 429, C.THROTTLED, Scope.ACCOUNT),
        ("21211", 400, C.PERMANENT, None),
        ("21217", 400, C.PERMANENT, None),
        ("21408", 400, C.ACCOUNT_FAULT, Scope.DESTINATION),
        ("21606", 400, C.ACCOUNT_FAULT, Scope.SENDER),
        ("21610", 400, C.OPTED_OUT, None),
        ("21611", 400, C.THROTTLED, Scope.SENDER),
        ("21614", 400, C.PERMANENT, None),
        ("30001", None, C.THROTTLED, Scope.SENDER),
        ("30002", None, C.ACCOUNT_FAULT, Scope.ACCOUNT),
        ("30003", None, C.PERMANENT, None),
        ("30004", None, C.PERMANENT, None),
        ("30005", None, C.PERMANENT, None),
        ("30006", None, C.PERMANENT, None),
        ("30007", None, C.PERMANENT, None),
        ("30008", None, C.TRANSIENT, None),
        ("30034", None, C.ACCOUNT_FAULT, Scope.SENDER),
        ("30036", None, C.TRANSIENT, None),
        ("20500", 500, C.TRANSIENT, None),
        ("20503", 503, C.TRANSIENT, None),
        ("20404", 404, C.ACCOUNT_FAULT, Scope.ACCOUNT),
        ("21659", 400, C.ACCOUNT_FAULT, Scope.SENDER),
        ("21660", 400, C.ACCOUNT_FAULT, Scope.SENDER),
        ("21661", 400, C.ACCOUNT_FAULT, Scope.SENDER),
        ("21705", 400, C.ACCOUNT_FAULT, Scope.SENDER),
        ("14107", None, C.THROTTLED, None),
        ("30022", None, C.THROTTLED, Scope.SENDER),
        ("30023", None, C.THROTTLED, Scope.SENDER),
        ("30500", None, C.TRANSIENT, None),
        ("63038", None, C.THROTTLED, Scope.ACCOUNT),
        ("63038", 400, C.THROTTLED, Scope.ACCOUNT),
        # unknown codes: by HTTP status at submission, "permanent" in a callback (never resent blindly)
        ("99999", 429, C.THROTTLED, Scope.ACCOUNT),
        ("99999", 401, C.ACCOUNT_FAULT, Scope.ACCOUNT),
        ("99999", 503, C.TRANSIENT, None),
        ("99999", 400, C.PERMANENT, None),
        ("", 500, C.TRANSIENT, None),
        ("", 404, C.ACCOUNT_FAULT, Scope.ACCOUNT),
        ("99999", None, C.PERMANENT, None),
    ],
)
def test_error_table(code, http, cls, scope):
    info = classify(code, http)
    assert info.error_class == cls and info.scope == scope and info.title


@pytest.mark.parametrize(
    ("code", "http", "outcome"),
    [
        # Twilio documents that it did not process these: safe to send again
        ("20429", 429, Outcome.TRANSIENT),
        ("", 429, Outcome.TRANSIENT),
        ("21611", 400, Outcome.TRANSIENT),
        ("63038", 400, Outcome.TRANSIENT),
        # refused, for good or until the account is fixed
        ("21211", 400, Outcome.REJECTED),
        ("99999", 400, Outcome.REJECTED),
        ("20404", 404, Outcome.REJECTED),
        ("20003", 401, Outcome.REJECTED),
        # no such guarantee: may hide a stored message, looked up before any resend
        ("20500", 500, Outcome.UNCERTAIN),
        ("20503", 503, Outcome.UNCERTAIN),
        ("", 502, Outcome.UNCERTAIN),
        ("", 504, Outcome.UNCERTAIN),
        ("99999", 599, Outcome.UNCERTAIN),
        ("21611", 503, Outcome.UNCERTAIN),  # a 5xx whatever its code says
        ("", 408, Outcome.UNCERTAIN),
        ("", 200, Outcome.UNCERTAIN),
        ("", 0, Outcome.UNCERTAIN),
    ],
)
def test_submission_outcome_is_transient_only_where_twilio_did_not_process_it(code, http, outcome):
    assert submission_outcome(http, classify(code, http)) == outcome


def test_validity_period_is_expires_minus_now_clamped_to_twilio_bounds():
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert validity_period(now + timedelta(seconds=90.2), now) == 91
    assert validity_period(now + timedelta(hours=48), now) == 36000  # Twilio's maximum (10 h)
    assert validity_period(now - timedelta(seconds=5), now) == 1  # Twilio's minimum


@pytest.mark.parametrize(
    ("sent", "stored", "same"),
    [
        ("Your code is 1234", "Your code is 1234", True),
        ("Your code is 1234", "Sent from your Twilio trial account - Your code is 1234", True),
        ("It\u2019s 5 \u2013 10\u2026", "It's 5 - 10...", True),  # Smart Encoding
        ("It\u2019s 5 \u2013 10\u2026", "Sent from your Twilio trial account - It's 5 - 10...", True),
        ("It\u2019s", "It\u2019s", True),  # Smart Encoding off: stored as sent
        # Twilio documents no other rewrite: whitespace is not collapsed, and a longer body that merely
        # ends with ours is another message
        ("two  spaces\nand a line", "two spaces and a line", False),
        ("Your code is 1234", "Other text. Your code is 1234", False),
        ("Your code is 1234", "Your code is 1234 ", False),
        ("Your code is 1234", "Your code is 9999", False),
        ("Your code is 1234", "Sent from your Twilio trial account - Your code is 12345", False),
        ("hello", "", False),
    ],
)
def test_body_matching_tolerates_twilio_rewrites_only(sent, stored, same):
    assert body_matches(sent, stored) is same


def test_callback_parse_hints_done_date_and_redaction():
    params = {
        "MessageSid": "SM" + "1" * 32,
        "SmsSid": "SM" + "1" * 32,
        "MessageStatus": "delivered",
        "To": "+14155550123",
        "From": "+14155550100",
        "Body": "secret text",
        "RawDlrDoneDate": "2611301205",
    }
    data = parse(params, {"m": "0123456789abcdef01234567", "a": "2"})
    assert data.normalized_status == "delivered"
    assert data.done_at == datetime(2026, 11, 30, 12, 5, tzinfo=UTC)
    assert (data.message_hint, data.attempt_hint) == ("0123456789abcdef01234567", 2)
    assert "Body" not in data.payload and "+14155550123" not in str(data.payload)
    # a forged or garbled hint is ignored, never trusted
    assert parse(params, {"m": "../etc", "a": "x"}).message_hint == ""
    assert carrier_minute("2613301205") is None
    with pytest.raises(CallbackInvalid) as info:
        parse({"MessageStatus": "sent"}, {})
    assert info.value.field == "MessageSid"


def test_classic_and_shared_key_signatures():
    url = "https://sms.example.com/receipts/twilio/?m=0123456789abcdef01234567&a=1"
    params = {"MessageSid": "SM" + "2" * 32, "MessageStatus": "sent"}
    classic = RequestValidator("auth-token").compute_signature(url, params)
    shared = RequestValidator("shared-secret").compute_signature(url, params, "HMAC_SHA256")
    keys = {"key1": "shared-secret"}
    settings_header = "key=key1,algorithm=HMAC_SHA256"

    def ok(headers, **kw):
        return validate(url, params, headers, auth_token="auth-token", shared_keys=kw.get("keys", keys))

    assert ok({"X-Twilio-Signature": classic})
    assert ok({"X-Twilio-Signature": shared, "X-Twilio-Webhooks-Signature-Settings": settings_header})
    # wrong ones are refused: a SHA-256 signature without the header, a classic one claiming a shared
    # key, a key header naming no key, no signature at all
    assert not ok({"X-Twilio-Signature": shared})
    assert not ok({"X-Twilio-Signature": classic, "X-Twilio-Webhooks-Signature-Settings": settings_header})
    assert not ok(
        {"X-Twilio-Signature": shared, "X-Twilio-Webhooks-Signature-Settings": "algorithm=HMAC_SHA256"}
    )
    assert not ok({})
    # an unknown key id, a key we do not hold: not accepted either, and told apart (our configuration
    # lacks the key; the endpoint answers 503, receipts.api)
    with pytest.raises(CallbackKeyUnknown) as unknown:
        ok(
            {
                "X-Twilio-Signature": shared,
                "X-Twilio-Webhooks-Signature-Settings": "key=other,algorithm=HMAC_SHA256",
            }
        )
    assert unknown.value.key_id == "other"
    with pytest.raises(CallbackKeyUnknown):
        ok({"X-Twilio-Signature": shared, "X-Twilio-Webhooks-Signature-Settings": settings_header}, keys={})


def test_provider_sockets_reset_on_close_and_bound_retransmission():
    factory = abortable_socket_factory(2.5)
    sock = factory((socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", 0)))
    try:
        linger = struct.unpack("ii", sock.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER, 8))
        assert linger == (1, 0)  # close() sends RST and drops anything unsent
        if hasattr(socket, "TCP_USER_TIMEOUT"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 2500
    finally:
        sock.close()
