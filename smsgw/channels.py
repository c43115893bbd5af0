"""A channel: the medium a message goes through, and what the core asks of it.

Two questions depend on the medium rather than on the provider: what a message costs, and what an
address looks like. The core asks them here, never the SMS rules directly:

- ``cost(body)``: the units a message is counted in (the message's ``segments``, which the quotas, the
  pacing and the senders' capacity count) and the encoding they were counted in. For SMS, GSM-7 or UCS-2
  segments (``smsgw.values.segments``);
- ``address(raw)``: a recipient, normalised, or ``AddressError`` saying why not. For SMS, an E.164 number
  (``smsgw.values.phone``);
- ``address_query(raw)``: ``address`` for a recipient given in a URL's query string (a list filter), as
  a query string carries it. For SMS, an unencoded ``+`` arrives as a space;
- ``sender(raw)``: a sender given by value (a request's ``from``), normalised, or ``AddressError``. For
  SMS, an E.164 number or an alphanumeric sender id.

Every message is an SMS today: the model has no channel field, and the call sites ask
``DEFAULT_CHANNEL``. A second channel (email: bytes, mailbox addresses) is a class here and a line in
``CHANNELS``; the message's field to choose it comes with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from smsgw.values.phone import PhoneNumberError, normalize_e164, normalize_e164_query
from smsgw.values.segments import (
    GSM7_BASIC_TABLE,
    GSM7_CONCAT_SEGMENT,
    GSM7_SINGLE_SEGMENT,
    Encoding,
    analyze,
)


class AddressError(ValueError):
    """Not an address of the channel; the text says why (shown to the tenant, naming the field)."""


@dataclass(frozen=True)
class Cost:
    encoding: str
    units: int


class Channel(Protocol):
    name: str

    def cost(self, body: str) -> Cost: ...

    def address(self, raw: str) -> str: ...

    def address_query(self, raw: str) -> str: ...

    def sender(self, raw: str) -> str: ...


# An alphanumeric sender id: 1-11 letters, digits and spaces, at least one letter (a digits-only one would
# read as a number or a short code).
ALPHANUMERIC_SENDER = re.compile(r"^(?=.*[A-Za-z])[A-Za-z0-9 ]{1,11}$")
# GSM-7 basic characters, one septet each: a body made only of these (nearly every body) has its segment
# count from its length, without the per-character walk of analyze() (a campaign counts one per row).
_GSM7_BASIC = re.compile("[" + re.escape(GSM7_BASIC_TABLE.replace("\x1b", "")) + "]*")


class Sms:
    name = "sms"

    def cost(self, body: str) -> Cost:
        """Segments, as ``segments.analyze`` counts them."""
        if _GSM7_BASIC.fullmatch(body):
            n = len(body)
            if n <= GSM7_SINGLE_SEGMENT:
                return Cost(Encoding.GSM7.value, 1 if n else 0)
            return Cost(Encoding.GSM7.value, -(-n // GSM7_CONCAT_SEGMENT))
        info = analyze(body)
        return Cost(info.encoding.value, info.segments)

    def address(self, raw: str) -> str:
        try:
            return normalize_e164(raw)
        except PhoneNumberError as exc:
            raise AddressError(str(exc)) from exc

    def address_query(self, raw: str) -> str:
        try:
            return normalize_e164_query(raw)
        except PhoneNumberError as exc:
            raise AddressError(str(exc)) from exc

    def sender(self, raw: str) -> str:
        if raw.startswith("+"):
            return self.address(raw)
        if not ALPHANUMERIC_SENDER.match(raw):
            raise AddressError("must be an E.164 number or an alphanumeric sender id of 1-11 characters")
        return raw


SMS = Sms()
CHANNELS: dict[str, Channel] = {SMS.name: SMS}
# The channel of every message until the model has a channel field.
DEFAULT_CHANNEL: Channel = SMS
