"""The Vonage sandbox's inbound SMS (POST /_sandbox/inbound): Vonage's inbound webhook as a real receiver
sees it, each part of a long message on its own in the order asked, signed so the gateway's
``callbacks.validate`` accepts it, resent until answered 200 or 204; copies and bursts."""

from __future__ import annotations

import itertools
import json
import re
import time
import urllib.error

import pytest

from delivery.providers.vonage import callbacks
from delivery.providers.vonage.sandbox.process import VonageSandboxProcess
from tests.provider_webhooks import ProviderWebhookReceiver
from tests.waiting import wait_for

OURS, THEIRS = "447700900000", "+447700900123"
SECRET, METHOD = "inbound-signature-secret", "sha256"
FIELDS = {"msisdn", "to", "messageId", "text", "type", "keyword", "message-timestamp", "api-key"}
SIGNED = {"timestamp", "nonce", "sig"}
CONCAT = {"concat", "concat-ref", "concat-total", "concat-part"}
FAST = {"inbound_retry_backoff_ms": 20, "inbound_retry_max_backoff_ms": 100}


@pytest.fixture(scope="module")
def vonage():
    signing = ["--signature-secret", SECRET, "--signature-method", METHOD]
    with VonageSandboxProcess(control_port=0, extra_args=signing) as process:
        yield process


@pytest.fixture(autouse=True)
def fresh(vonage):
    vonage.reset()
    vonage.config(**FAST)


def settled(vonage, deliveries: int) -> dict:
    def done():
        counts = vonage.stats()["inbound"]
        return (
            counts
            if counts["pending"] == 0 and counts["delivered"] + counts["failed"] >= deliveries
            else None
        )

    return wait_for(done, 15, f"{deliveries} inbound deliveries settled")


def verified(vonage, fields: dict) -> bool:
    """What the gateway's inbound endpoint checks (receipts.api._signed_form -> adapter -> validate)."""
    return callbacks.validate(fields, api_key=vonage.api_key, secret=SECRET, method=METHOD, max_age=300)


def test_one_message_is_one_signed_json_webhook_with_vonages_fields(vonage):
    with ProviderWebhookReceiver() as receiver:
        answer = vonage.inbound(THEIRS, OURS, "stop please", url=receiver.url())
        settled(vonage, 1)
        (record,) = receiver.seen()
    fields = record["fields"]
    assert set(fields) == FIELDS | SIGNED
    assert record["method"] == "POST" and record["headers"]["Content-Type"] == "application/json"
    assert answer["ids"] == [fields["messageId"]] and re.fullmatch(r"[0-9A-F]{16}", fields["messageId"])
    assert (fields["msisdn"], fields["to"], fields["text"]) == (THEIRS[1:], OURS, "stop please")
    assert (fields["type"], fields["keyword"], fields["api-key"]) == ("text", "STOP", vonage.api_key)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", fields["message-timestamp"])
    assert abs(int(fields["timestamp"]) - time.time()) < 60
    assert verified(vonage, fields)
    assert not verified(vonage, {**fields, "text": "start"})


def test_the_parts_of_a_long_message_arrive_in_the_order_asked_each_signed(vonage):
    text = "".join(f"word{i:03d} " for i in range(55))  # 440 GSM-7 characters: 3 parts of <= 153
    with ProviderWebhookReceiver() as receiver:
        answer = vonage.inbound(THEIRS, OURS, text, url=receiver.url(), parts_order=[3, 1, 2])
        settled(vonage, 3)
        seen = [r["fields"] for r in receiver.seen()]
    assert [f["concat-part"] for f in seen] == ["3", "1", "2"]
    assert answer["ids"] == [f["messageId"] for f in seen] and len(set(answer["ids"])) == 3
    assert {f["concat"] for f in seen} == {"true"} and {f["concat-total"] for f in seen} == {"3"}
    assert len({f["concat-ref"] for f in seen}) == 1 and 0 <= int(seen[0]["concat-ref"]) <= 255
    by_part = {f["concat-part"]: f["text"] for f in seen}
    assert by_part["1"] + by_part["2"] + by_part["3"] == text
    assert all(len(part) <= 153 for part in by_part.values())
    assert all(set(f) == FIELDS | SIGNED | CONCAT and verified(vonage, f) for f in seen)
    assert answer["messages"][0]["id"] == next(f["messageId"] for f in seen if f["concat-part"] == "1")


def test_unicode_parts_are_split_at_67(vonage):
    with ProviderWebhookReceiver() as receiver:
        vonage.inbound(THEIRS, OURS, "ж" * 100, url=receiver.url())
        settled(vonage, 2)
        seen = sorted((r["fields"] for r in receiver.seen()), key=lambda f: f["concat-part"])
    assert [len(f["text"]) for f in seen] == [67, 33] and {f["type"] for f in seen} == {"unicode"}


def test_a_webhook_is_resent_until_answered_200(vonage):
    # Waits long enough to tell apart (0.1, 0.2, 0.4 s); a gap is never shorter than its wait, however
    # loaded the machine (a ratio of measured gaps was not: 20 ms waits drowned in scheduling delays).
    base = 0.1
    vonage.config(inbound_retry_backoff_ms=base * 1000, inbound_retry_max_backoff_ms=1000)
    failing = [(500, "", "text/plain")] * 2 + [(201, "", "text/plain")]  # only 200 or 204 will do
    with ProviderWebhookReceiver(failing, default=(204, "", "text/plain")) as receiver:
        answer = vonage.inbound(THEIRS, OURS, "hello", url=receiver.url())
        settled(vonage, 1)
        seen = receiver.seen()
    assert [r["answered"] for r in seen] == [500, 500, 201, 204]
    assert {r["fields"]["messageId"] for r in seen} == set(answer["ids"])
    assert len({r["fields"]["nonce"] for r in seen}) == 4  # a new signature on every attempt
    assert all(verified(vonage, r["fields"]) for r in seen)
    gaps = [b["at"] - a["at"] for a, b in itertools.pairwise(seen)]
    assert all(gap >= base * 2**i for i, gap in enumerate(gaps)), gaps  # backed off, doubling each time
    (logged,) = vonage.inbound_log()
    assert logged["statuses"] == [500, 500, 201, 204]
    assert vonage.stats()["inbound"]["retries"] == 3


def test_retries_end_with_the_window(vonage):
    vonage.config(inbound_retry_window_seconds=0.2)
    with ProviderWebhookReceiver(default=(503, "", "text/plain")) as receiver:
        vonage.inbound(THEIRS, OURS, "nobody home", url=receiver.url())
        counts = settled(vonage, 1)
        attempts = len(receiver.seen())
    assert counts["failed"] == 1 and 2 <= attempts <= 6


def test_copies_keep_the_message_id_and_a_burst_makes_distinct_ones(vonage):
    with ProviderWebhookReceiver() as receiver:
        copied = vonage.inbound(THEIRS, OURS, "again", url=receiver.url(), copies=3)
        burst = vonage.inbound(THEIRS, OURS, "bench", url=receiver.url(), burst=25)
        settled(vonage, 28)
        seen = receiver.seen()
    ids = [r["fields"]["messageId"] for r in seen]
    assert ids.count(copied["ids"][0]) == 3
    assert len(set(burst["ids"])) == 25 and set(burst["ids"]) <= set(ids)


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_the_accounts_webhook_method(vonage, method):
    vonage.config(receipt_method=method)
    with ProviderWebhookReceiver() as receiver:
        vonage.inbound(THEIRS, OURS, "a&b=c", url=receiver.url("/inbound/vonage/?x=1"))
        settled(vonage, 1)
        (record,) = receiver.seen()
    assert record["method"] == method
    fields = {k: v for k, v in record["fields"].items() if k != "x"}
    assert fields["text"] == "a&b=c" and verified(vonage, fields)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"to": "Acme"}, "to"),
        ({"body": ""}, "body"),
        ({"parts_order": [1, 2]}, "parts_order"),  # one part only
        ({"type": "binary"}, "type"),
        ({"delay_ms": -1}, "delay_ms"),
    ],
)
def test_a_bad_request_is_refused_naming_its_field(vonage, changes, field):
    payload = {"from": THEIRS, "to": OURS, "body": "x", "url": "http://127.0.0.1:9/", **changes}
    with pytest.raises(urllib.error.HTTPError) as caught:
        vonage._request("POST", "/_sandbox/inbound", payload)
    assert caught.value.code == 400
    assert json.loads(caught.value.read())["field"] == field
