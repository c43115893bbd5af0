"""Cursor pages for every list endpoint, strict about what they read.

DRF's CursorPagination forgives too much: it decodes base64 leniently (characters outside the alphabet are
dropped, so ``!!!`` reads as an empty cursor), treats a cursor that decodes to arbitrary text as "page 1",
passes a forged position straight into the query (``p=abc`` on an integer ordering was a 500; an
out-of-range integer a 500 on PostgreSQL), and silently clamps or ignores a bad ``page_size``. Here a
cursor is accepted only if it is exactly what ``encode_cursor`` could have produced, and a bad one is a
400 naming ``cursor``; ``page_size`` must be a whole number from 1 to ``max_page_size`` or it is a 400
naming ``page_size``.
"""

from __future__ import annotations

import base64
import binascii
import re
from urllib import parse

from rest_framework.pagination import Cursor, CursorPagination

from smsgw.http.errors import field_error

_DIGITS = re.compile(r"[0-9]{1,19}")
_INT64_MAX = 2**63 - 1
# A cursor this code makes is under 60 characters (base64 of "o=<offset>&r=1&p=<19 digits>"); a longer one is
# refused before it is decoded.
MAX_CURSOR_CHARS = 200
_TOKENS = frozenset({"o", "r", "p"})
INVALID_CURSOR = "invalid cursor: use the next or previous link of a page as given"


class StrictCursorPagination(CursorPagination):
    """Newest first by id (every list here orders by an integer primary key)."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_size(self, request):
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not _DIGITS.fullmatch(raw) or not 1 <= int(raw) <= self.max_page_size:
            raise field_error(
                self.page_size_query_param, f"must be a whole number from 1 to {self.max_page_size}"
            )
        return int(raw)

    def decode_cursor(self, request):
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is None:
            return None
        if len(encoded) > MAX_CURSOR_CHARS:
            raise field_error(self.cursor_query_param, INVALID_CURSOR)
        try:
            querystring = base64.b64decode(encoded.encode("ascii"), validate=True).decode("ascii")
            tokens = parse.parse_qs(querystring, keep_blank_values=True, strict_parsing=True)
        except (UnicodeError, binascii.Error, ValueError):
            raise field_error(self.cursor_query_param, INVALID_CURSOR) from None
        if not tokens or not tokens.keys() <= _TOKENS or any(len(v) != 1 for v in tokens.values()):
            raise field_error(self.cursor_query_param, INVALID_CURSOR)
        offset = tokens.get("o", ["0"])[0]
        reverse = tokens.get("r", ["0"])[0]
        position = tokens.get("p", [None])[0]
        if not _DIGITS.fullmatch(offset) or int(offset) > self.offset_cutoff or reverse not in ("0", "1"):
            raise field_error(self.cursor_query_param, INVALID_CURSOR)
        if position is not None and not (_DIGITS.fullmatch(position) and int(position) <= _INT64_MAX):
            raise field_error(self.cursor_query_param, INVALID_CURSOR)
        # DRF keeps the position as the text it encodes (_get_position_from_instance returns str); the
        # stubs type it as int.
        return Cursor(offset=int(offset), reverse=reverse == "1", position=position)  # type: ignore[arg-type]
