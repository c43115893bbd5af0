"""Whole numbers read from text (a query parameter, a form field, a rule part, a provider's callback field)
as the contract spells them: ASCII digits only.

Python's own checks are wider than that. ``int()`` reads Arabic-Indic ("\\u0661\\u0662"), full-width
("\\uff11\\uff12") and every other Unicode decimal digit, surrounding spaces and underscores ("1_0"),
and refuses more than 4,300 digits with a ValueError; ``str.isdigit()`` says yes to superscripts ("²")
that ``int()`` then refuses; a regex's ``\\d`` matches any Unicode decimal digit. Each was a 500 where
the check was trusted, or a number accepted that no client meant."""

from __future__ import annotations


def is_ascii_digits(text: str) -> bool:
    """``text`` is one or more of 0-9 and nothing else."""
    return text.isascii() and text.isdigit()


def ascii_int(text: str, *, max_digits: int = 18) -> int | None:
    """The whole number ``text`` spells in at most ``max_digits`` ASCII digits (no sign, no spaces), else
    None. 18 digits always fit a signed 64-bit column."""
    if len(text) > max_digits or not is_ascii_digits(text):
        return None
    return int(text)
