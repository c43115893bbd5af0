"""SMS encoding and segment count.

A body is sent as GSM-7 when every character is in the GSM 03.38 default alphabet (basic table) or
its extension table; otherwise as UCS-2 (UTF-16).

* GSM-7: 160 septets fit in one segment; a concatenated message carries 153 septets per segment (the
  user data header takes the rest). Extension-table characters are sent as ESC + char and cost two
  septets; the pair must not be split across segments, so one that would straddle a boundary moves to
  the next segment.
* UCS-2: 70 UTF-16 code units in one segment, 67 per segment when concatenated. Characters outside
  the BMP (most emoji) are surrogate pairs (2 units) and are never split across segments.

Segments are counted by actually packing characters, not by dividing totals, because of the two
no-split rules above.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["GSM7_BASIC_TABLE", "GSM7_EXTENSION_TABLE", "Encoding", "SegmentInfo", "analyze"]

# GSM 03.38 (3GPP TS 23.038 §6.2.1) default alphabet, basic table: the character at index N is the
# one encoded as septet N (0x00-0x7F). Index 0x1B is the escape to the extension table and is not
# itself a character (a literal ESC in a body is not GSM-encodable). Note 0x09 is CAPITAL "Ç" — there
# is no lowercase "ç" in the alphabet — 0x24 is "¤" (not "$", which is 0x02), 0x40 is "¡" and 0x60
# is "¿" (not "@", which is 0x00, nor "`", which does not exist).
GSM7_BASIC_TABLE = (
    "@£$¥èéùìòÇ\nØø\rÅå"  # 0x00-0x0F
    "Δ_ΦΓΛΩΠΨΣΘΞ\x1bÆæßÉ"  # 0x10-0x1F (0x1B = escape)
    " !\"#¤%&'()*+,-./"  # 0x20-0x2F
    "0123456789:;<=>?"  # 0x30-0x3F
    "¡ABCDEFGHIJKLMNO"  # 0x40-0x4F
    "PQRSTUVWXYZÄÖÑÜ§"  # 0x50-0x5F
    "¿abcdefghijklmno"  # 0x60-0x6F
    "pqrstuvwxyzäöñüà"  # 0x70-0x7F
)
# GSM 03.38 extension table (reached via 0x1B): form feed (0x0A), ^ (0x14), { (0x28), } (0x29),
# \ (0x2F), [ (0x3C), ~ (0x3D), ] (0x3E), | (0x40), € (0x65). Each costs two septets (ESC + code).
GSM7_EXTENSION_TABLE = "\f^{}\\[~]|€"

assert len(GSM7_BASIC_TABLE) == 128

_GSM7_SINGLE = frozenset(GSM7_BASIC_TABLE) - {"\x1b"}
_GSM7_DOUBLE = frozenset(GSM7_EXTENSION_TABLE)

GSM7_SINGLE_SEGMENT = 160
GSM7_CONCAT_SEGMENT = 153
UCS2_SINGLE_SEGMENT = 70
UCS2_CONCAT_SEGMENT = 67


class Encoding(StrEnum):
    GSM7 = "GSM-7"
    UCS2 = "UCS-2"


@dataclass(frozen=True)
class SegmentInfo:
    """``units`` is the total length in septets (GSM-7) or UTF-16 code units (UCS-2)."""

    encoding: Encoding
    segments: int
    units: int


def _gsm7_costs(body: str) -> list[int] | None:
    """Septet cost per character, or ``None`` when a character is not GSM-7 encodable."""
    costs = []
    for char in body:
        if char in _GSM7_SINGLE:
            costs.append(1)
        elif char in _GSM7_DOUBLE:
            costs.append(2)
        else:
            return None
    return costs


def _pack(costs: list[int], single: int, concat: int) -> int:
    """Number of segments needed for indivisible items of the given sizes."""
    total = sum(costs)
    if total == 0:
        return 0
    if total <= single:
        return 1
    segments, used = 1, 0
    for cost in costs:
        if used + cost > concat:
            segments += 1
            used = 0
        used += cost
    return segments


def analyze(body: str) -> SegmentInfo:
    """Encoding, segment count and length in encoding units of an SMS body (empty -> 0 segments)."""
    costs = _gsm7_costs(body)
    if costs is not None:
        return SegmentInfo(
            encoding=Encoding.GSM7,
            segments=_pack(costs, GSM7_SINGLE_SEGMENT, GSM7_CONCAT_SEGMENT),
            units=sum(costs),
        )
    ucs2 = [2 if ord(char) > 0xFFFF else 1 for char in body]
    return SegmentInfo(
        encoding=Encoding.UCS2,
        segments=_pack(ucs2, UCS2_SINGLE_SEGMENT, UCS2_CONCAT_SEGMENT),
        units=sum(ucs2),
    )
