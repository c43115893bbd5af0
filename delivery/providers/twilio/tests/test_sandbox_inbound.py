"""The sandbox's inbound messages (POST /_sandbox/inbound): Twilio's incoming-message webhook request, as
a real receiver sees it, signed so the SDK's RequestValidator accepts it; copies, bursts, retries and
the TwiML answer's <Message> replies, stored as sent messages."""

from __future__ import annotations

import json
import re
import urllib.error

import pytest
from twilio.request_validator import RequestValidator

from delivery.providers.twilio import callbacks
from delivery.providers.twilio.sandbox.process import TwilioSandboxProcess
from tests.provider_webhooks import ProviderWebhookReceiver
from tests.waiting import wait_for

OURS, THEIRS = "+15005550006", "+447700900123"
SERVICE = "MG" + "c" * 32
FIELDS = {
    "MessageSid",
    "SmsMessageSid",
    "SmsSid",
    "AccountSid",
    "From",
    "To",
    "Body",
    "NumMedia",
    "NumSegments",
    "SmsStatus",
    "ApiVersion",
    *(f"{side}{geo}" for side in ("From", "To") for geo in ("City", "State", "Zip", "Country")),
}
TWIML = "text/xml"
REPLY = '<?xml version="1.0" encoding="UTF-8"?><Response><Message>Thanks, noted.</Message></Response>'


@pytest.fixture(scope="module")
def twilio():
    with TwilioSandboxProcess() as process:
        yield process


@pytest.fixture(autouse=True)
def fresh(twilio):
    twilio.reset()
    twilio.config(callback_retry_backoff_ms=10, callback_delay_ms=0)


def settled(twilio, deliveries: int) -> dict:
    def done():
        counts = twilio.stats()["inbound"]
        return (
            counts
            if counts["pending"] == 0 and counts["delivered"] + counts["failed"] >= deliveries
            else None
        )

    return wait_for(done, 10, f"{deliveries} inbound deliveries settled")


def test_the_form_is_twilios_and_the_sdk_validates_its_signature(twilio):
    with ProviderWebhookReceiver() as receiver:
        url = receiver.url("/inbound/twilio/?tenant=a%20b")
        answer = twilio.inbound(THEIRS, OURS, "Hello from the handset", url=url)
        settled(twilio, 1)
        (record,) = receiver.seen()
    (sid,) = answer["ids"]
    assert re.fullmatch(r"SM[0-9a-f]{32}", sid)
    assert answer["messages"] == [{"id": sid, "webhooks": [sid]}] and answer["copies"] == 1
    form = record["fields"]
    assert set(form) == FIELDS
    assert form["MessageSid"] == form["SmsSid"] == form["SmsMessageSid"] == sid
    assert form["From"] == THEIRS and form["To"] == OURS and form["Body"] == "Hello from the handset"
    assert form["AccountSid"] == twilio.account_sid and form["ApiVersion"] == "2010-04-01"
    assert (form["SmsStatus"], form["NumMedia"], form["NumSegments"]) == ("received", "0", "1")
    assert (form["FromCountry"], form["ToCountry"], form["FromCity"]) == ("GB", "US", "")
    assert record["method"] == "POST"
    assert record["headers"]["Content-Type"] == "application/x-www-form-urlencoded"
    signature = record["headers"]["X-Twilio-Signature"]
    assert RequestValidator(twilio.auth_token).validate(record["url"], form, signature)
    assert not RequestValidator("another-token").validate(record["url"], form, signature)
    # what the gateway's /inbound/twilio/ checks (receipts.api._signed_form -> the adapter -> this)
    assert callbacks.validate(
        record["url"], form, record["headers"], auth_token=twilio.auth_token, shared_keys={}
    )


def test_a_number_in_a_messaging_service(twilio):
    with ProviderWebhookReceiver() as receiver:
        twilio.inbound(THEIRS, SERVICE, "hi", url=receiver.url())
        twilio.inbound(THEIRS, OURS, "hi", url=receiver.url(), messaging_service_sid=SERVICE)
        settled(twilio, 2)
        via_sid, explicit = (r["fields"] for r in receiver.seen())
    assert via_sid["MessagingServiceSid"] == explicit["MessagingServiceSid"] == SERVICE
    assert re.fullmatch(r"\+1500555\d{4}", via_sid["To"]) and explicit["To"] == OURS


def test_copies_are_deliveries_of_the_same_message_sid(twilio):
    with ProviderWebhookReceiver() as receiver:
        answer = twilio.inbound(THEIRS, OURS, "twice? five times", url=receiver.url(), copies=5)
        settled(twilio, 5)
        seen = receiver.seen()
    assert len(seen) == 5
    assert {r["fields"]["MessageSid"] for r in seen} == set(answer["ids"])
    assert len({r["headers"]["I-Twilio-Idempotency-Token"] for r in seen}) == 5
    (logged,) = twilio.inbound_log(answer["ids"][0])
    assert [d["copy"] for d in logged["deliveries"]] == [1, 2, 3, 4, 5]
    assert logged["statuses"] == [200] * 5 and logged["attempts"] == 5


def test_a_burst_is_distinct_messages(twilio):
    with ProviderWebhookReceiver() as receiver:
        answer = twilio.inbound(THEIRS, OURS, "bench", url=receiver.url(), burst=40)
        settled(twilio, 40)
        seen = receiver.seen()
    assert len(set(answer["ids"])) == 40
    assert {r["fields"]["MessageSid"] for r in seen} == set(answer["ids"])


def test_the_twiml_messages_are_sent_as_replies(twilio):
    answers = [(200, REPLY, TWIML)]
    with ProviderWebhookReceiver(answers) as receiver:
        answer = twilio.inbound(THEIRS, OURS, "STATUS?", url=receiver.url())
        settled(twilio, 1)
    (logged,) = twilio.inbound_log()
    attempt = logged["deliveries"][0]["attempts"][0]
    assert (attempt["status"], attempt["response"]) == (200, REPLY)
    (reply,) = logged["replies"]
    assert (reply["to"], reply["from"], reply["body"]) == (THEIRS, OURS, "Thanks, noted.")
    (sent,) = twilio.list_messages(to=THEIRS)  # Twilio "creates a Message when ... <Message>"
    assert (sent.sid, sent.from_, sent.body) == (reply["sid"], OURS, "Thanks, noted.")
    assert answer["ids"] != [sent.sid]


def test_an_empty_response_sends_nothing_and_bad_twiml_is_recorded(twilio):
    answers = [(200, "<Response/>", TWIML), (200, "not xml", TWIML)]
    with ProviderWebhookReceiver(answers) as receiver:
        twilio.inbound(THEIRS, OURS, "one", url=receiver.url(), copies=2)
        settled(twilio, 2)
    (logged,) = twilio.inbound_log()
    assert [r["error_code"] for r in logged["replies"]] == [12100]  # Document parse failure
    assert twilio.list_messages(to=THEIRS) == []


def test_an_http_answer_is_final_by_default_and_retried_by_policy(twilio):
    with ProviderWebhookReceiver([(500, "", "text/plain")] * 2) as receiver:
        twilio.inbound(THEIRS, OURS, "a", url=receiver.url())
        settled(twilio, 1)
        assert [r["answered"] for r in receiver.seen()] == [500]
        twilio.config(callback_retry_policy="5xx", callback_retries=2)
        twilio.inbound(THEIRS, OURS, "b", url=receiver.url())
        settled(twilio, 2)
        assert [r["answered"] for r in receiver.seen()] == [500, 500, 200]
    assert twilio.stats()["inbound"] == {
        "messages": 2,
        "webhooks": 2,
        "attempts": 3,
        "retries": 1,
        "delivered": 1,
        "failed": 1,
        "pending": 0,
    }


def test_the_configured_inbound_url_and_copies_are_the_defaults(twilio):
    with ProviderWebhookReceiver() as receiver:
        twilio.config(inbound_url=receiver.url("/configured/"), inbound_copies=2)
        answer = twilio.inbound(THEIRS, OURS, "x")
        settled(twilio, 2)
        assert {r["path"] for r in receiver.seen()} == {"/configured/"}
    assert answer["copies"] == 2


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"from": "447700900123"}, "from"),
        ({"to": "SMSGW"}, "to"),
        ({"body": None}, "body"),
        ({"url": "ftp://x"}, "url"),
        ({"copies": 0}, "copies"),
        ({"burst": 10_001}, "burst"),
        ({"parts_order": [2, 1]}, "parts_order"),
        ({"color": "red"}, "color"),
    ],
)
def test_a_bad_request_is_refused_naming_its_field(twilio, changes, field):
    payload = {"from": THEIRS, "to": OURS, "body": "x", "url": "http://127.0.0.1:9/", **changes}
    payload = {k: v for k, v in payload.items() if v is not None}
    with pytest.raises(urllib.error.HTTPError) as caught:
        twilio._request("POST", "/_sandbox/inbound", payload)
    assert caught.value.code == 400
    assert json.loads(caught.value.read())["field"] == field


def test_no_url_anywhere_is_refused(twilio):
    with pytest.raises(urllib.error.HTTPError) as caught:
        twilio.inbound(THEIRS, OURS, "x")
    assert caught.value.code == 400
    assert json.loads(caught.value.read())["field"] == "url"
