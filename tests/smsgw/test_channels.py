"""The SMS channel (smsgw.channels): a message's cost is its segments as smsgw.values.segments counts them
(the length shortcut for plain GSM-7 bodies included), a recipient is an E.164 number and a sender an
E.164 number or an alphanumeric id, with the texts the API shows."""

from __future__ import annotations

import pytest

from smsgw.channels import CHANNELS, DEFAULT_CHANNEL, SMS, AddressError, Cost
from smsgw.values.phone import PhoneNumberError, normalize_e164
from smsgw.values.segments import GSM7_BASIC_TABLE, GSM7_EXTENSION_TABLE, analyze

BASIC = GSM7_BASIC_TABLE.replace("\x1b", "")


def test_every_message_goes_through_sms_today():
    assert DEFAULT_CHANNEL is SMS and CHANNELS == {"sms": SMS}


@pytest.mark.parametrize(
    "body",
    [
        "",
        "a",
        "a" * 160,  # the last single-segment length: the shortcut's boundary
        "a" * 161,
        "a" * 306,
        "a" * 307,
        BASIC * 5,
        "a" * 159 + "€",  # an extension character: two septets, no shortcut
        "a" * 152 + "{" + "a" * 10,  # an escape pair that would straddle a segment boundary
        GSM7_EXTENSION_TABLE * 20,
        "é" * 200,  # é is GSM-7 (basic table)
        "ç" * 71,  # lowercase ç is not: UCS-2
        "😀" * 40,  # surrogate pairs
    ],
    ids=lambda body: f"{len(body)}:{body[:3]!r}",
)
def test_the_cost_is_the_segment_count(body):
    info = analyze(body)
    assert SMS.cost(body) == Cost(info.encoding.value, info.segments)


def test_the_recipient_is_an_e164_number_with_the_values_text():
    assert SMS.address("+1 (415) 555-0100") == "+14155550100"
    for raw in ("4155550100", "+1555", "+1415555010x"):
        with pytest.raises(PhoneNumberError) as expected:
            normalize_e164(raw)
        with pytest.raises(AddressError) as refused:
            SMS.address(raw)
        assert str(refused.value) == str(expected.value)


def test_a_sender_is_a_number_or_an_alphanumeric_id():
    assert SMS.sender("+1 415 555 0100") == "+14155550100"
    assert SMS.sender("ACME Shop") == "ACME Shop"
    for raw in ("12345", "ACME-SHOP", "A" * 12, ""):
        with pytest.raises(AddressError) as refused:
            SMS.sender(raw)
        assert str(refused.value) == "must be an E.164 number or an alphanumeric sender id of 1-11 characters"
    with pytest.raises(AddressError, match=r"may contain only '\+' followed by digits"):
        SMS.sender("+1 415 CALL")  # a + means a number, and is read as one
