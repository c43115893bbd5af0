"""RFC 5545 input for schedules: the RRULE value, the local ``start`` (DTSTART) and the EXDATE list,
parsed and validated part by part so an error names the offending part (``BYMONTHDAY=32: ...``).
Expansion lives in ``scheduling.schedules.recurrence``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime

from dateutil import rrule as du

from smsgw.values.digits import ascii_int

__all__ = [
    "MAX_COUNT",
    "MAX_EXDATES",
    "ParsedRule",
    "RuleError",
    "parse_exdates",
    "parse_rrule",
    "parse_start",
]

# Caps that keep one schedule's expansion cheap and its intent plausible.
MAX_COUNT = 10_000
MAX_INTERVAL = 1_000
MAX_EXDATES = 500
MAX_RRULE_LENGTH = 1_000


class RuleError(ValueError):
    """Bad schedule input; ``field`` names the request field (``rrule``, ``start``, ``exdate``, ...)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message

    def __str__(self) -> str:
        return self.message


FREQS = {
    "YEARLY": du.YEARLY,
    "MONTHLY": du.MONTHLY,
    "WEEKLY": du.WEEKLY,
    "DAILY": du.DAILY,
    "HOURLY": du.HOURLY,
    "MINUTELY": du.MINUTELY,
    "SECONDLY": du.SECONDLY,
}
FREQ_NAMES = {v: k for k, v in FREQS.items()}
WEEKDAYS = {"MO": du.MO, "TU": du.TU, "WE": du.WE, "TH": du.TH, "FR": du.FR, "SA": du.SA, "SU": du.SU}
WEEKDAY_NAMES = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"]
_NUMBER_LISTS = {
    # part: (dateutil kwarg, allowed range, negatives allowed)
    "BYMONTH": ("bymonth", (1, 12), False),
    "BYMONTHDAY": ("bymonthday", (1, 31), True),
    "BYYEARDAY": ("byyearday", (1, 366), True),
    "BYWEEKNO": ("byweekno", (1, 53), True),
    "BYHOUR": ("byhour", (0, 23), False),
    "BYMINUTE": ("byminute", (0, 59), False),
    "BYSECOND": ("bysecond", (0, 59), False),
    "BYSETPOS": ("bysetpos", (1, 366), True),
}
_KNOWN = {"FREQ", "INTERVAL", "COUNT", "UNTIL", "BYDAY", "WKST", *_NUMBER_LISTS}
# Canonical output order (FREQ first, as RFC 5545 recommends).
_ORDER = [
    "FREQ",
    "INTERVAL",
    "BYMONTH",
    "BYWEEKNO",
    "BYYEARDAY",
    "BYMONTHDAY",
    "BYDAY",
    "BYHOUR",
    "BYMINUTE",
    "BYSECOND",
    "BYSETPOS",
    "WKST",
    "COUNT",
    "UNTIL",
]
# [0-9], not \d: \d matches every Unicode decimal digit (Arabic-Indic, full-width), which int() reads
# (smsgw.values.digits).
_BYDAY_RE = re.compile(r"([+-]?)([0-9]{1,2})?(MO|TU|WE|TH|FR|SA|SU)")
_INT_RE = re.compile(r"[+-]?[0-9]{1,4}")
_UNTIL_UTC_RE = re.compile(r"([0-9]{8})T([0-9]{6})Z")
_UNTIL_FLOATING_RE = re.compile(r"[0-9]{8}T[0-9]{6}")
_DATE_RE = re.compile(r"[0-9]{8}")


def _err(message: str) -> RuleError:
    return RuleError("rrule", message)


# --- parsing ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedRule:
    """An RRULE value, validated part by part. ``kwargs`` holds the BYxxx parts for dateutil."""

    freq: int
    interval: int = 1
    count: int | None = None
    until: datetime | None = None  # aware UTC
    wkst: int = 0
    kwargs: dict = field(default_factory=dict)
    parts: dict = field(default_factory=dict)  # canonical text of each part, for ``text``

    @property
    def text(self) -> str:
        return ";".join(f"{name}={self.parts[name]}" for name in _ORDER if name in self.parts)


def _number_list(name: str, value: str) -> tuple[int, ...]:
    _, (low, high), negatives = _NUMBER_LISTS[name]
    out = []
    for item in value.split(","):
        if not _INT_RE.fullmatch(item):
            raise _err(f"{name}={value}: {item!r} is not a whole number")
        n = int(item)
        if low <= n <= high or (negatives and -high <= n <= -low):
            out.append(n)
        else:
            span = f"{low}..{high}" + (f" or -{high}..-{low}" if negatives else "")
            raise _err(f"{name}={value}: {n} is out of range ({span})")
    if len(set(out)) != len(out):
        raise _err(f"{name}={value}: a value is repeated")
    return tuple(out)


def _byday(value: str, freq: int, has_byweekno: bool) -> tuple[tuple, str]:
    days, shown = [], []
    for item in value.split(","):
        m = _BYDAY_RE.fullmatch(item)
        if not m:
            raise _err(f"BYDAY={value}: {item!r} is not a weekday such as MO, 2TU or -1FR")
        sign, ordinal, wd = m.groups()
        if ordinal is None:
            if sign:
                raise _err(f"BYDAY={value}: {item!r} has a sign but no number")
            days.append(WEEKDAYS[wd])
            shown.append(wd)
            continue
        n = int(ordinal) * (-1 if sign == "-" else 1)
        if n == 0 or abs(n) > 53:
            raise _err(f"BYDAY={value}: {item!r}: the ordinal must be 1..53 or -53..-1")
        if freq not in (du.MONTHLY, du.YEARLY):
            raise _err(f"BYDAY={value}: an ordinal weekday ({item}) needs FREQ=MONTHLY or FREQ=YEARLY")
        if freq == du.YEARLY and has_byweekno:
            raise _err(f"BYDAY={value}: an ordinal weekday ({item}) cannot be combined with BYWEEKNO")
        if freq == du.MONTHLY and abs(n) > 5:
            raise _err(f"BYDAY={value}: {item!r}: a month has at most 5 of each weekday")
        days.append(WEEKDAYS[wd](n))
        shown.append(f"{n}{wd}")
    if len(set(shown)) != len(shown):
        raise _err(f"BYDAY={value}: a weekday is repeated")
    return tuple(days), ",".join(shown)


def _until(value: str) -> datetime:
    m = _UNTIL_UTC_RE.fullmatch(value)
    if m:
        try:
            return datetime.strptime(m.group(1) + m.group(2), "%Y%m%d%H%M%S").replace(tzinfo=UTC)
        except ValueError:
            raise _err(f"UNTIL={value}: not a real date and time") from None
    # RFC 5545 §3.3.10: with a DTSTART that is a local time with a time zone reference, UNTIL MUST be a
    # UTC date-time. A DATE or a floating time here is the DTSTART/UNTIL type mismatch the RFC forbids.
    if _DATE_RE.fullmatch(value):
        raise _err(
            f"UNTIL={value}: is a date, but start is a date-time; give a UTC date-time such as "
            f"UNTIL={value}T235959Z"
        )
    if _UNTIL_FLOATING_RE.fullmatch(value):
        raise _err(
            f"UNTIL={value}: is a floating local time, but start has a timezone; give it in UTC with a "
            f"trailing Z, e.g. UNTIL={value}Z"
        )
    raise _err(f"UNTIL={value}: expected a UTC date-time such as 20270630T215959Z")


def parse_rrule(text: str) -> ParsedRule:
    """Parse an RRULE value (``"FREQ=WEEKLY;BYDAY=MO,TU"``, optionally prefixed ``RRULE:``).

    Errors name the offending part (``BYMONTHDAY=32: 32 is out of range``). Syntax and RFC 5545
    combination rules only; whether the rule fires at all is checked by :func:`recurrence_build`.
    """
    values = _rule_values(_rule_line(text))
    if "FREQ" not in values:
        raise _err("FREQ is required (YEARLY, MONTHLY, WEEKLY, DAILY, HOURLY, MINUTELY or SECONDLY)")
    if values["FREQ"] not in FREQS:
        raise _err(f"FREQ={values['FREQ']}: must be one of {', '.join(FREQS)}")
    freq = FREQS[values["FREQ"]]
    parts = {"FREQ": values["FREQ"]}
    interval = _interval(values, parts)
    count, until = _end(values, parts)
    wkst = 0
    if "WKST" in values:
        if values["WKST"] not in WEEKDAYS:
            raise _err(f"WKST={values['WKST']}: must be one of {', '.join(WEEKDAY_NAMES)}")
        wkst = WEEKDAY_NAMES.index(values["WKST"])
        parts["WKST"] = values["WKST"]
    kwargs: dict = {}
    for name, (kwarg, _, _) in _NUMBER_LISTS.items():
        if name in values:
            kwargs[kwarg] = _number_list(name, values[name])
            parts[name] = ",".join(str(n) for n in kwargs[kwarg])
    if "BYDAY" in values:
        kwargs["byweekday"], parts["BYDAY"] = _byday(values["BYDAY"], freq, "BYWEEKNO" in values)
    _combinations_check(kwargs, freq, values["FREQ"])
    return ParsedRule(
        freq=freq, interval=interval, count=count, until=until, wkst=wkst, kwargs=kwargs, parts=parts
    )


def _rule_line(text: str) -> str:
    """The rule's one line, without its ``RRULE:`` prefix."""
    if not isinstance(text, str) or not text.strip():
        raise _err("must be an RRULE such as FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR")
    raw = text.strip()
    if len(raw) > MAX_RRULE_LENGTH:
        raise _err(f"is longer than {MAX_RRULE_LENGTH} characters")
    if raw.upper().startswith("RRULE:"):
        raw = raw[6:]
    if "\n" in raw or "\r" in raw:
        raise _err("must be a single RRULE line (put the start time in 'start' and dates in 'exdate')")
    return raw


def _rule_values(raw: str) -> dict[str, str]:
    """Each part's value by its name (upper case), each known part at most once."""
    values: dict[str, str] = {}
    for part in raw.split(";"):
        if not part:
            raise _err(f"empty part in {raw!r} (a doubled or trailing ';')")
        name, sep, value = part.partition("=")
        name = name.strip().upper()
        value = value.strip().upper()
        if not sep or not value:
            raise _err(f"{part!r}: expected NAME=VALUE")
        if name == "DTSTART":
            raise _err("DTSTART is not part of the rule here; give it as 'start' (with 'timezone')")
        if name not in _KNOWN:
            raise _err(f"{name}: unknown rule part; allowed: {', '.join(_ORDER)}")
        if name in values:
            raise _err(f"{name}: given twice")
        values[name] = value
    return values


def _interval(values: dict[str, str], parts: dict[str, str]) -> int:
    if "INTERVAL" not in values:
        return 1
    v = values["INTERVAL"]
    n = ascii_int(v, max_digits=9)
    if n is None or not 1 <= n <= MAX_INTERVAL:
        raise _err(f"INTERVAL={v}: must be a whole number from 1 to {MAX_INTERVAL}")
    if n != 1:
        parts["INTERVAL"] = str(n)
    return n


def _end(values: dict[str, str], parts: dict[str, str]) -> tuple[int | None, datetime | None]:
    """(COUNT, UNTIL): at most one of them."""
    if "COUNT" in values and "UNTIL" in values:
        raise _err("COUNT and UNTIL cannot both be given (RFC 5545); keep one of them")
    count = None
    if "COUNT" in values:
        v = values["COUNT"]
        count = ascii_int(v, max_digits=9)
        if count is None or not 1 <= count <= MAX_COUNT:
            raise _err(f"COUNT={v}: must be a whole number from 1 to {MAX_COUNT}")
        parts["COUNT"] = str(count)
    until = None
    if "UNTIL" in values:
        until = _until(values["UNTIL"])
        parts["UNTIL"] = until.strftime("%Y%m%dT%H%M%SZ")
    return count, until


def _combinations_check(kwargs: dict, freq: int, freq_name: str) -> None:
    """RFC 5545 §3.3.10 combination rules."""
    if "bymonthday" in kwargs and freq == du.WEEKLY:
        raise _err("BYMONTHDAY cannot be used with FREQ=WEEKLY")
    if "byyearday" in kwargs and freq in (du.MONTHLY, du.WEEKLY, du.DAILY):
        raise _err(f"BYYEARDAY cannot be used with FREQ={freq_name}")
    if "byweekno" in kwargs and freq != du.YEARLY:
        raise _err("BYWEEKNO can only be used with FREQ=YEARLY")
    if "bysetpos" in kwargs and len(kwargs) == 1:
        raise _err("BYSETPOS needs another BYxxx part to select from (e.g. BYDAY=MO,TU,WE,TH,FR)")


_START_FORMATS = "a local date-time such as 2026-12-01T08:30:00 (no offset; the zone goes in 'timezone')"


MAX_START_YEAR = 9000


def parse_start(value: str) -> datetime:
    """``start``: a naive local wall time with a time of day, whole seconds."""
    if not isinstance(value, str) or not value.strip():
        raise RuleError("start", f"is required: {_START_FORMATS}")
    text = value.strip()
    try:
        date.fromisoformat(text)
    except ValueError:
        pass
    else:
        raise RuleError("start", f"{text!r} is a date only; it needs a time of day: {_START_FORMATS}")
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise RuleError("start", f"{text!r} is not valid; expected {_START_FORMATS}") from None
    if parsed.tzinfo is not None:
        raise RuleError(
            "start",
            f"{text!r} has a UTC offset; a schedule is a local wall time, so give it without an offset "
            "and put the IANA zone in 'timezone'",
        )
    if parsed.microsecond:
        raise RuleError("start", f"{text!r}: fractions of a second are not supported")
    if parsed.year > MAX_START_YEAR:  # the rule's 100-year bound must stay within datetime's range
        raise RuleError("start", f"{text!r}: the year must be at most {MAX_START_YEAR}")
    return parsed


def parse_exdates(values, tz_name: str) -> tuple[frozenset[datetime], frozenset[date]]:
    """EXDATE values in the schedule's local time: ``2026-12-25`` (that whole local day) or
    ``2026-12-25T08:30:00`` (that occurrence). RFC 5545 compact forms (``20261225``,
    ``20261225T083000``) are accepted too. A value with an offset or ``Z`` is not in the rule's local
    time and is rejected."""
    if values is None:
        return frozenset(), frozenset()
    if isinstance(values, str):
        values = [v for v in values.split(",") if v.strip()]
    if not isinstance(values, (list, tuple)):
        raise RuleError("exdate", "must be a list of local dates or date-times")
    if len(values) > MAX_EXDATES:
        raise RuleError("exdate", f"at most {MAX_EXDATES} values")
    times, days = set(), set()
    for i, raw in enumerate(values):
        value = _exdate(i, raw, tz_name)
        if isinstance(value, datetime):
            times.add(value)
        else:
            days.add(value)
    return frozenset(times), frozenset(days)


def _exdate(i: int, raw: object, tz_name: str) -> date | datetime:
    """One EXDATE value: a whole local day (a date) or one occurrence (a naive local date-time)."""
    if not isinstance(raw, str) or not raw.strip():
        raise RuleError("exdate", f"exdate[{i}]: must be a date or a local date-time string")
    text = raw.strip()
    if _DATE_RE.fullmatch(text):
        text = f"{text[:4]}-{text[4:6]}-{text[6:]}"
    elif re.fullmatch(r"[0-9]{8}T[0-9]{6}Z?", text):
        text = f"{text[:4]}-{text[4:6]}-{text[6:8]}T{text[9:11]}:{text[11:13]}:{text[13:15]}" + (
            "Z" if text.endswith("Z") else ""
        )
    try:
        return date.fromisoformat(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise RuleError(
            "exdate", f"exdate[{i}] {raw!r}: expected a date (2026-12-25) or a local date-time"
        ) from None
    if parsed.tzinfo is not None:
        raise RuleError(
            "exdate",
            f"exdate[{i}] {raw!r} has a UTC offset; exceptions are local times in {tz_name} "
            f"(write it without an offset, e.g. {parsed.replace(tzinfo=None).isoformat()} local)",
        )
    if parsed.microsecond:
        raise RuleError("exdate", f"exdate[{i}] {raw!r}: fractions of a second are not supported")
    return parsed
