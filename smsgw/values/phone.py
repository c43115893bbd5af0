"""Phone number normalisation (E.164) and masking for logs.

``normalize_e164`` accepts only international numbers written with a leading ``+`` (visual
separators — spaces, hyphens, dots, parentheses — are tolerated), parses them with ``phonenumbers``,
requires ``is_valid_number`` and returns the canonical E.164 form (``"+14155550100"``). Letters
(vanity numbers, "ext."), other symbols, non-ASCII digits and more than 15 digits are rejected.

``mask`` hides the middle of a number for logs and stored raw callbacks.
"""

from __future__ import annotations

import re

import phonenumbers

__all__ = [
    "VALID_FICTIONAL_NUMBERS",
    "PhoneNumberError",
    "mask",
    "normalize_e164",
    "normalize_e164_query",
    "search_forms",
]

VALID_FICTIONAL_NUMBERS: tuple[str, ...] = (
    "+14155550100",
    "+12025550143",
    "+12125550199",
    "+442079460123",
    "+61491570156",
    "+61255501234",
)
"""Numbers that ``normalize_e164`` accepts (valid per phonenumbers 9.0.43) and that sit in ranges
reserved for fiction, so they are safe in tests and fixtures:

* ``+14155550100``, ``+12025550143``, ``+12125550199`` — NANP 555-0100..555-0199 (fictional use).
* ``+442079460123`` — UK Ofcom drama range 020 7946 0000..0999 (London).
* ``+61491570156`` — Australian ACMA fictional mobile number (0491 570 156).
* ``+61255501234`` — Australian ACMA fictional range 02 5550 xxxx (Sydney).

Beware: phonenumbers considers the UK drama *mobile* range 07700 900xxx (``+447700900123``) and
``+1555...`` numbers **invalid**. ``+442071838750`` and ``+4915112345678`` are valid but are not in a
reserved fiction range (they may belong to real subscribers), so prefer the ones above.
"""


class PhoneNumberError(ValueError):
    """The input is not a valid international (E.164) phone number."""


E164_MAX_DIGITS = 15
_RAW_MAX_LEN = 32
# "+" then ASCII digits, optionally separated by single visual separators, and digit groups in
# parentheses. Each repetition takes exactly one digit or one whole "(digits)" group, so there is one
# way to match any prefix and the engine never backtracks through alternatives: linear time. (The
# older "[0-9]+" inside the repetition could split a run of digits 2^n ways, and "+" followed by 30
# digits and a letter took about 30 s of CPU to reject.) Same language as before.
_RAW_RE = re.compile(r"\+[0-9](?:[ .\-]?(?:\([0-9]+\)|[0-9]))*")
_E164_RE = re.compile(r"\+[0-9]+")


def normalize_e164(raw: str) -> str:
    """Return ``raw`` as canonical E.164 (``"+14155550100"``) or raise :class:`PhoneNumberError`."""
    if not isinstance(raw, str):
        raise PhoneNumberError(f"phone number must be a string, got {type(raw).__name__}")
    text = raw.strip()
    if not text:
        raise PhoneNumberError("phone number is empty")
    if len(text) > _RAW_MAX_LEN:
        raise PhoneNumberError("phone number is too long")
    if not text.startswith("+"):
        raise PhoneNumberError("phone number must be in international E.164 form starting with '+'")
    if not _RAW_RE.fullmatch(text):
        raise PhoneNumberError(
            "phone number may contain only '+' followed by digits (spaces, '-', '.', '()' allowed)"
        )
    digits = sum(c.isdigit() for c in text)
    if digits > E164_MAX_DIGITS:
        raise PhoneNumberError(f"phone number has more than {E164_MAX_DIGITS} digits")
    if _E164_RE.fullmatch(text) and (canonical := _valid_as_written(text)):
        return canonical
    try:
        parsed = phonenumbers.parse(text, None)
    except phonenumbers.NumberParseException as exc:
        raise PhoneNumberError(f"phone number could not be parsed: {exc}") from None
    if not phonenumbers.is_valid_number(parsed):
        raise PhoneNumberError("phone number is not a valid number for its country")
    return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)


def _valid_as_written(text: str) -> str | None:
    """``text`` ("+" and digits only) when it is already a valid number in canonical E.164, else None
    (then the full parse decides). Half the cost of phonenumbers.parse, which a campaign pays per row:
    the country code is the one prefix of 1-3 digits that names one, and the rest is the national
    number. It only ever accepts: anything it cannot vouch for (a national prefix after the country
    code, Italy's leading zero, an invalid number) goes through the full parse, which may still accept
    it in another form."""
    for length in (1, 2, 3):
        code = int(text[1 : 1 + length])
        if code in phonenumbers.COUNTRY_CODE_TO_REGION_CODE:
            national = text[1 + length :]
            if not national or national[0] == "0":
                return None
            number = phonenumbers.PhoneNumber(country_code=code, national_number=int(national))
            return text if phonenumbers.is_valid_number(number) else None
    return None


def normalize_e164_query(raw: str) -> str:
    """``normalize_e164`` for a number given in a URL's query string, where an unencoded ``+`` arrives as
    a space: ``?to=+14155550100`` is read as ``" 14155550100"``. A leading space before a digit is that
    ``+``; anything else is judged exactly as the field is."""
    if isinstance(raw, str) and raw[:1] == " ":
        text = raw.lstrip(" ")
        if text[:1].isascii() and text[:1].isdigit():
            raw = "+" + text
    return normalize_e164(raw)


_MASK_HEAD_DIGITS = 4
_MASK_TAIL_DIGITS = 2
_MASK_MIN_HIDDEN = 3


def mask(e164: str) -> str:
    """Mask a number for logs: ``"+14155550167"`` -> ``"+1415*****67"``.

    For an E.164 string, ``+`` and the first 4 digits and the last 2 digits stay visible; the rest
    becomes ``*`` (same length). Short numbers show fewer leading digits so at least 3 stay hidden.
    Anything else (unnormalised or garbage input, e.g. from a raw callback) keeps only its last 2
    characters. Never raises for string input.
    """
    text = (e164 or "").strip()
    if not text:
        return ""
    if _E164_RE.fullmatch(text):
        digits = text[1:]
        n = len(digits)
        tail = min(_MASK_TAIL_DIGITS, max(0, n - _MASK_MIN_HIDDEN))
        head = min(_MASK_HEAD_DIGITS, max(0, n - tail - _MASK_MIN_HIDDEN))
        hidden = n - head - tail
        return "+" + digits[:head] + "*" * hidden + digits[n - tail :]
    keep = min(_MASK_TAIL_DIGITS, max(0, len(text) - _MASK_MIN_HIDDEN))
    return "*" * (len(text) - keep) + text[len(text) - keep :]


def search_forms(term: str, default_region: str) -> list[str]:
    """The E.164 numbers an operator may mean by ``term`` when searching: an international number in
    any common writing (``+1 (415) 555-0123``, ``00 44 20 7946 0123``) or a national one in
    ``default_region`` (``(415) 555-0123``, ``020 7946 0123`` with region GB). Empty when ``term`` is
    not a valid number, so a search for an id or a word never turns into a number search."""
    text = (term or "").strip()
    if not text or len(text) > _RAW_MAX_LEN or not any(c.isdigit() for c in text):
        return []
    if text.startswith("00"):
        text = "+" + text[2:]
    try:
        parsed = phonenumbers.parse(text, None if text.startswith("+") else default_region)
    except phonenumbers.NumberParseException:
        return []
    if not phonenumbers.is_valid_number(parsed):
        return []
    return [phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)]
