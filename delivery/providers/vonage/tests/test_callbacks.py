"""Vonage's signed callbacks (delivery.providers.vonage.callbacks): the signature of every method, the
timestamp window, the replay key, and the inbound SMS webhook's fields."""

from __future__ import annotations

import time

import pytest

from delivery.providers.base import CallbackInvalid
from delivery.providers.vonage import callbacks
from delivery.providers.vonage.sandbox.parts import signature

SECRET = "a-signature-secret"
KEY = "a1b2c3d4"
NOW = 1_800_000_000


def signed(fields: dict, *, method: str = "sha256", at: int = NOW, secret: str = SECRET) -> dict:
    params = {**fields, "api-key": KEY, "timestamp": str(at), "nonce": "5f1c0e2a"}
    return {**params, "sig": signature(params, secret, method)}


def check(params: dict, *, method: str = "sha256", max_age: float = 300, now: float = NOW) -> bool:
    return callbacks.validate(params, api_key=KEY, secret=SECRET, method=method, max_age=max_age, now=now)


RECEIPT = {"messageId": "0A0000001234ABCD", "status": "delivered", "err-code": "0", "msisdn": "447700900001"}


@pytest.mark.parametrize("method", ["md5hash", "md5", "sha1", "sha256", "sha512"])
def test_a_receipt_signed_with_the_secret_and_recent_is_taken(method):
    assert check(signed(RECEIPT, method=method), method=method)


@pytest.mark.parametrize(
    "forge",
    [
        lambda p: {**p, "status": "failed"},  # a field changed after signing
        lambda p: {**p, "sig": "0" * 64},  # a made-up signature
        lambda p: {k: v for k, v in p.items() if k != "sig"},  # unsigned
        lambda p: {k: v for k, v in p.items() if k != "timestamp"},  # the signed timestamp removed
        lambda p: {**p, "api-key": "ffffffff"},  # another account's
    ],
)
def test_a_forged_receipt_is_refused(forge):
    assert not check(forge(signed(RECEIPT)))


def test_a_receipt_signed_with_another_secret_is_refused():
    assert not check(signed(RECEIPT, secret="someone-elses-secret"))


@pytest.mark.parametrize("offset", [-301, 301, -86_400])
def test_a_well_signed_receipt_outside_the_window_is_refused_naming_timestamp(offset):
    with pytest.raises(CallbackInvalid) as refused:
        check(signed(RECEIPT, at=NOW + offset))
    assert refused.value.field == "timestamp"


@pytest.mark.parametrize("offset", [-300, 0, 300])
def test_the_window_is_inclusive_both_ways(offset):
    assert check(signed(RECEIPT, at=NOW + offset))


def test_a_longer_window_takes_an_older_timestamp():
    assert check(signed(RECEIPT, at=NOW - 3600), max_age=7200)


def test_a_signed_timestamp_that_is_not_a_number_is_refused():
    with pytest.raises(CallbackInvalid):
        check(
            {**(p := {**RECEIPT, "api-key": KEY, "timestamp": "soon"}), "sig": signature(p, SECRET, "sha256")}
        )


def test_without_a_secret_every_receipt_is_taken_and_the_clock_is_not_read():
    assert callbacks.validate(RECEIPT, api_key=KEY, secret="", method="md5hash", max_age=300, now=0)


def test_the_replay_key_is_the_signature_whatever_its_case():
    params = signed(RECEIPT)
    assert callbacks.replay_key(params) == params["sig"].lower()
    assert callbacks.replay_key({**params, "sig": params["sig"].lower()}) == callbacks.replay_key(params)
    assert callbacks.replay_key(RECEIPT) == ""


def test_the_real_clock_is_used_without_now():
    params = signed(RECEIPT, at=int(time.time()))
    assert callbacks.validate(params, api_key=KEY, secret=SECRET, method="sha256", max_age=300)


# --- inbound messages (developer.vonage.com/messaging/sms/guides/inbound-sms) ----------------------------

INBOUND = {
    "msisdn": "447700900001",
    "to": "447700900100",
    "messageId": "0A0000000123ABCD",
    "text": "STOP",
    "type": "text",
    "keyword": "STOP",
    "message-timestamp": "2026-12-04 10:00:00",
}


def test_an_inbound_message_gives_its_text_and_numbers_in_e164():
    inbound = callbacks.parse_inbound(INBOUND)
    assert (inbound.body, inbound.from_number, inbound.to_number) == (
        "STOP",
        "+447700900001",
        "+447700900100",
    )
    assert inbound.from_field == "msisdn"


def test_an_inbound_message_gives_its_id_and_the_providers_time():
    inbound = callbacks.parse_inbound(INBOUND)
    assert (inbound.message_id, inbound.id_field, inbound.concat_total) == (
        "0A0000000123ABCD",
        "messageId",
        0,
    )
    assert inbound.sent_at is not None and inbound.sent_at.isoformat() == "2026-12-04T10:00:00+00:00"
    assert "text" not in inbound.payload and "msisdn" not in inbound.payload


def test_a_part_of_a_long_message_says_which_part_and_a_binary_one_has_no_text():
    part = {**INBOUND, "concat": "true", "concat-ref": "1", "concat-total": "3", "concat-part": "3"}
    parsed = callbacks.parse_inbound(part)
    assert (parsed.body, parsed.concat_ref, parsed.concat_total, parsed.concat_part) == ("STOP", "1", 3, 3)
    assert callbacks.parse_inbound({**INBOUND, "type": "binary", "data": "00", "udh": "00"}).body == ""


@pytest.mark.parametrize(
    ("field", "changes"),
    [
        ("messageId", {"messageId": ""}),
        ("concat-part", {"concat": "true", "concat-ref": "7", "concat-total": "2", "concat-part": "3"}),
        ("concat-ref", {"concat": "true", "concat-total": "2", "concat-part": "1"}),
    ],
)
def test_an_inbound_message_without_its_id_or_with_a_bad_part_names_the_field(field, changes):
    with pytest.raises(CallbackInvalid) as refused:
        callbacks.parse_inbound({**INBOUND, **changes})
    assert refused.value.field == field


@pytest.mark.parametrize("missing", ["msisdn", "to"])
def test_an_inbound_message_without_its_numbers_names_the_field(missing):
    with pytest.raises(CallbackInvalid) as refused:
        callbacks.parse_inbound({k: v for k, v in INBOUND.items() if k != missing})
    assert refused.value.field == missing
