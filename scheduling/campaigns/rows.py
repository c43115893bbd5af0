"""Reading a campaign's recipients: the body template, the CSV stream and the per-recipient values.

Pure Python (no models), so the request-level checks (the view) and the creation job (a worker) read a
list the same way.

Templates are ``{name}`` placeholders with ``{{`` and ``}}`` for literal braces, rendered by plain
substitution: never ``str.format``, which reads attributes and items (``{x.__class__}``) of what it is
given. A placeholder a recipient has no value for is that recipient's error, not the campaign's.
"""

from __future__ import annotations

import codecs
import csv
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache

import phonenumbers
from phonenumbers import timezone as phone_timezones

_TOKEN = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]{0,63})\}|\{|\}")
# The recipient's column is `to`, as in every request of the API; `phone` is its deprecated alias, still
# read (docs/campaigns.md). Neither is a template variable's column.
RECIPIENT = "to"
RECIPIENT_ALIAS = "phone"
RESERVED_COLUMNS = (RECIPIENT, RECIPIENT_ALIAS, "timezone")
MAX_COLUMNS = 64
# A CSV field longer than this is a broken file (an unclosed quote swallowing the rest), not a name.
MAX_FIELD_CHARS = 4096


class TemplateError(ValueError):
    pass


@dataclass(frozen=True)
class Template:
    """Literal text and variable names alternating: parts[0] literal, parts[1] a name, parts[2] ..."""

    parts: tuple[str, ...]

    @property
    def variables(self) -> list[str]:
        seen: list[str] = []
        for name in self.parts[1::2]:
            if name not in seen:
                seen.append(name)
        return seen

    def render(self, values: dict[str, str]) -> str:
        """The body for one recipient; KeyError names the first variable it has no value for."""
        parts = self.parts
        if len(parts) == 1:
            return parts[0]
        out = [parts[0]]
        for i in range(1, len(parts), 2):
            value = values.get(parts[i])
            if value is None or value == "":
                raise KeyError(parts[i])
            out.append(value)
            out.append(parts[i + 1])
        return "".join(out)


def template_parse(text: str, *, is_template: bool) -> Template:
    """A plain body is one literal part (braces and all); a template is parsed into parts, and a lone
    brace is a TemplateError (``{{`` / ``}}`` write one)."""
    if not is_template:
        return Template((text,))
    parts: list[str] = []
    literal: list[str] = []
    pos = 0
    for m in _TOKEN.finditer(text):
        literal.append(text[pos : m.start()])
        token = m.group(0)
        if token == "{{":
            literal.append("{")
        elif token == "}}":
            literal.append("}")
        elif m.group(1):
            parts.append("".join(literal))
            parts.append(m.group(1))
            literal = []
        else:
            raise TemplateError(
                f"unmatched {token!r} at character {m.start() + 1}: placeholders look like {{first_name}}, "
                "and {{ or }} writes a literal brace"
            )
        pos = m.end()
    literal.append(text[pos:])
    parts.append("".join(literal))
    return Template(tuple(parts))


def zone_of_number(e164: str) -> str | None:
    """The one IANA zone phonenumbers' timezone data gives the number, or None when it maps to none,
    several (the USA, Russia, Australia's mobiles, ...) or only "unknown"."""
    zones = phone_timezones.time_zones_for_number(phonenumbers.parse(e164, None))
    if len(zones) == 1 and zones[0] != phone_timezones.UNKNOWN_TIMEZONE:
        return zones[0]
    return None


def decoded_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Text lines (with their endings) from UTF-8 byte chunks, decoded incrementally: a character or a
    line split across two chunks is joined, and only one chunk is held at a time. A BOM is dropped."""
    decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
    pending = ""
    for chunk in chunks:
        text = pending + decoder.decode(chunk)
        lines = text.splitlines(keepends=True)
        pending = lines.pop() if lines and not lines[-1].endswith(("\n", "\r")) else ""
        yield from lines
    tail = pending + decoder.decode(b"", final=True)
    if tail:
        yield tail


@lru_cache(maxsize=1)
def _csv_field_limit() -> None:
    csv.field_size_limit(MAX_FIELD_CHARS)


def csv_records(lines: Iterable[str]) -> Iterator[tuple[int, list[str] | None]]:
    """(line number, fields) per CSV record; the line is the record's last physical line (1 = the header).
    A record that is not valid CSV is yielded with fields None."""
    _csv_field_limit()
    reader = csv.reader(lines, strict=False)
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error:
            yield reader.line_num, None
            continue
        yield reader.line_num, fields


def recipient_column(names: list[str]) -> str:
    """The column that holds the recipient: ``to``, or ``phone`` in a list that uses the alias. Read once
    per list (header_check refuses a header with both), never per row."""
    return RECIPIENT_ALIAS if RECIPIENT_ALIAS in names and RECIPIENT not in names else RECIPIENT


def header_check(header: list[str] | None, variables: list[str]) -> list[str]:
    """The header's column names, or ValueError saying what is wrong with it."""
    if not header:
        raise ValueError("the CSV file is empty; its first line names the columns (to, then variables)")
    names = [h.strip() for h in header]
    if len(names) > MAX_COLUMNS:
        raise ValueError(f"the CSV header has {len(names)} columns; at most {MAX_COLUMNS}")
    if RECIPIENT not in names and RECIPIENT_ALIAS not in names:
        raise ValueError("the CSV header has no 'to' column (and no 'phone' column, its deprecated alias)")
    if RECIPIENT in names and RECIPIENT_ALIAS in names:
        # Which one would hold the recipient is anyone's guess, and the rows are read later, by the job:
        # refused now, while the client is there to hear it, rather than row by row.
        raise ValueError("the CSV header has both 'to' and 'phone' (its deprecated alias): keep one of them")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"the CSV header names {dupes[0]!r} twice")
    missing = [v for v in variables if v not in names]
    if missing:
        raise ValueError(f"the CSV header has no column for the template variable {missing[0]!r}")
    return names
