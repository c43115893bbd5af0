"""Whole numbers from text: ASCII digits only, whatever int() and str.isdigit() would take."""

from __future__ import annotations

import pytest

from smsgw.values.digits import ascii_int, is_ascii_digits

# Each is read by int() or passes str.isdigit() (or both); none is what the contract documents.
NOT_ASCII_DIGITS = {
    "superscript": "\u00b2",  # isdigit() True, int() raises
    "arabic-indic": "\u0661\u0662",  # int() reads 12
    "full-width": "\uff11\uff12",  # int() reads 12
    "devanagari": "\u0967",
    "underscore": "1_0",  # int() reads 10
    "leading-space": " 12",  # int() strips it
    "trailing-newline": "12\n",
    "sign": "+12",
    "negative": "-1",
    "empty": "",
    "decimal": "1.0",
}


@pytest.mark.parametrize("text", NOT_ASCII_DIGITS.values(), ids=NOT_ASCII_DIGITS.keys())
def test_only_ascii_digits_are_a_number(text):
    assert not is_ascii_digits(text)
    assert ascii_int(text) is None


def test_ascii_digits_are_read_up_to_max_digits():
    assert ascii_int("0") == 0
    assert ascii_int("007") == 7
    assert ascii_int("9" * 18) == 10**18 - 1
    assert ascii_int("9" * 19) is None  # past the default 18: a signed 64-bit column's width
    assert ascii_int("12345", max_digits=5) == 12345
    assert ascii_int("123456", max_digits=5) is None


def test_more_digits_than_int_reads_is_none_not_a_value_error():
    with pytest.raises(ValueError):
        int("9" * 5000)  # Python refuses over 4,300 digits (a 500 where it was trusted)
    assert ascii_int("9" * 5000) is None
