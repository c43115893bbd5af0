"""Tests for smsgw.values.phone."""

from __future__ import annotations

import itertools
import re
import time

import pytest

from smsgw.values.phone import _RAW_RE, VALID_FICTIONAL_NUMBERS, PhoneNumberError, mask, normalize_e164


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("+14155550100", "+14155550100"),
        ("+12025550143", "+12025550143"),
        ("+442079460123", "+442079460123"),
        ("+442071838750", "+442071838750"),
        ("+4915112345678", "+4915112345678"),
        ("+61491570156", "+61491570156"),
        ("+61255501234", "+61255501234"),
        ("  +14155550100  ", "+14155550100"),
        ("+1 415 555 0100", "+14155550100"),
        ("+1 (415) 555-0100", "+14155550100"),
        ("+1.415.555.0100", "+14155550100"),
        ("+44 20 7946 0123", "+442079460123"),
        ("+44 (0) 20 7946 0123", "+442079460123"),  # UK trunk prefix in parentheses is dropped
        ("+49 151 1234 5678", "+4915112345678"),
    ],
)
def test_normalize_valid(raw, expected):
    assert normalize_e164(raw) == expected


@pytest.mark.parametrize("number", VALID_FICTIONAL_NUMBERS)
def test_documented_fictional_numbers_are_valid_and_canonical(number):
    assert normalize_e164(number) == number


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   ",
        "14155550100",  # no leading +
        "004414155550100",  # international prefix instead of +
        "(415) 555-0100",
        "+",
        "++14155550100",
        "+1-800-FLOWERS",  # letters (vanity)
        "+1415555O100",  # letter O instead of zero
        "+14155550100 ext 5",
        "+14155550100;ext=5",
        "+14155550100#",
        "+1*4155550100",
        "+1 415 555 0100 x",
        "+1/415/5550100",
        "+1--415-555-0100",
        "+1 415  555 0100",
        "+\uff114155550100",  # fullwidth digit one
        "+1\u0664\u0661\u06655550100",  # Arabic-Indic digits
        "+1415555010",  # too short for NANP
        "+141555501000",  # too long for NANP
        "+1234567890123456",  # 16 digits: over E.164's 15
        "+1" + "0" * 40,
        "+15555550100",  # 555 is not a valid area code
        "+447700900123",  # Ofcom drama mobile range: phonenumbers says invalid
        "+999123456789",  # unassigned country code
        "+0123456789",
        "tel:+14155550100",
        "<script>",
    ],
)
def test_normalize_rejects(raw):
    with pytest.raises(PhoneNumberError):
        normalize_e164(raw)


def test_normalize_rejects_non_string():
    with pytest.raises(PhoneNumberError):
        normalize_e164(14155550100)  # type: ignore[arg-type]


def test_phone_number_error_is_value_error():
    assert issubclass(PhoneNumberError, ValueError)


def test_error_message_mentions_plus():
    with pytest.raises(PhoneNumberError, match=r"\+"):
        normalize_e164("14155550100")


# --- mask -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("number", "expected"),
    [
        ("+14155550167", "+1415*****67"),
        ("+442079460123", "+4420******23"),
        ("+4915112345678", "+4915*******78"),
        ("+61491570156", "+6149*****56"),
        ("+123456789", "+1234***89"),  # 9 digits: 4 shown, 3 hidden, 2 shown
        ("+12345678", "+123***78"),  # fewer digits: head shrinks so 3 stay hidden
        ("+2901234", "+29***34"),
        ("+123", "+***"),
    ],
)
def test_mask_e164(number, expected):
    assert mask(number) == expected
    assert len(mask(number)) == len(number)


def test_mask_never_reveals_middle():
    masked = mask("+14155550167")
    assert "5550" not in masked
    assert masked.count("*") == 5


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", ""),
        ("   ", ""),
        ("ab", "**"),
        ("abc", "***"),
        ("+1 415 555 0167", "*************67"),
        ("whatsapp:+14155550167", "*******************67"),
    ],
)
def test_mask_non_e164_keeps_only_last_two(raw, expected):
    assert mask(raw) == expected


def test_mask_accepts_none_like_empty():
    assert mask(None) == ""  # type: ignore[arg-type]


# --- linear time (issue 37): the old pattern backtracked 2^n ways on "+" and n digits ----------------
_ATTACKS = [
    "+" + "1" * 31 + "x",
    "+" + "1" * 40,
    "+" + "1 " * 15 + "x",
    "+1" + "-1" * 15 + "-",
    "+" + "(1" * 15 + "x",
    "+" + "(1)" * 10 + "x",
]


@pytest.mark.parametrize("raw", _ATTACKS)
def test_normalize_rejects_backtracking_attacks_in_well_under_a_second(raw):
    started = time.process_time()
    for _ in range(100):
        with pytest.raises(PhoneNumberError):
            normalize_e164(raw)
    assert time.process_time() - started < 1.0


_OLD_RAW_RE = re.compile(r"\+[0-9]+(?:[ .\-]?(?:\([0-9]+\)|[0-9]+))*")  # exponential, kept as the oracle


def test_raw_pattern_accepts_exactly_what_the_old_one_did():
    # Every string of up to 6 characters over the pattern's alphabet (and a letter): the linear pattern
    # and the old one agree on each, so no valid input changes its answer.
    for length in range(1, 7):
        for chars in itertools.product("+12 .-()x", repeat=length):
            text = "".join(chars)
            assert bool(_RAW_RE.fullmatch(text)) == bool(_OLD_RAW_RE.fullmatch(text)), text
