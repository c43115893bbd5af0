"""A Vonage send split into the parts a handset receives, each a ``VonagePart`` with its own
``message-id`` and receipt, and Vonage's signature (requests and receipts). Must not import Django.

Parts (developer.vonage.com/messaging/sms/guides/concatenation-and-encoding): a GSM-7 text (``type``
``text``, the default) is one part up to 160 characters, else parts of 153 (the rest of each part holds
the concatenation header); characters of the GSM extension table take two. ``type=unicode`` (UCS-2):
70, else parts of 67 UTF-16 code units. A part never ends between an escape and its character, or
between the two halves of a surrogate pair. The SMS API answers one ``messages[]`` entry per part
(developer.vonage.com/messaging/sms/guides/troubleshooting-sms: "an array of message objects, one for
each message") and sends one receipt per part (developer.vonage.com/messaging/sms/guides/
delivery-receipts: "you should receive a carrier DLR for each part of the concatenated SMS").
"""

from __future__ import annotations

import hashlib
import hmac
import os

from sandbox.gsm7 import _GSM7_EXT

GSM_SINGLE, GSM_PART = 160, 153
UCS2_SINGLE, UCS2_PART = 70, 67


def split_parts(text: str, unicode: bool) -> list[str]:
    """The parts of ``text`` as Vonage sends them (see the module's docstring)."""
    if unicode:
        units = [2 if ord(c) > 0xFFFF else 1 for c in text]
        single, per_part = UCS2_SINGLE, UCS2_PART
    else:
        units = [2 if c in _GSM7_EXT else 1 for c in text]
        single, per_part = GSM_SINGLE, GSM_PART
    if sum(units) <= single:
        return [text]
    parts: list[str] = []
    start = used = 0
    for i, size in enumerate(units):
        if used + size > per_part:
            parts.append(text[start:i])
            start, used = i, 0
        used += size
    parts.append(text[start:])
    return parts


def new_message_id() -> str:
    """16 upper-case hex digits, like Vonage's ``message-id`` (e.g. "0C000000217B7F02")."""
    return os.urandom(8).hex().upper()


def signature(params: dict[str, str], secret: str, method: str) -> str:
    """Vonage's ``sig`` over ``params`` (``sig`` itself left out): for each parameter sorted by name,
    ``&name=value`` with ``&`` and ``=`` in the value replaced by ``_``; "md5hash": MD5 of that string
    followed by the secret, lower-case hex; the HMAC methods: HMAC(secret, string), upper-case hex
    (developer.vonage.com/getting-started/concepts/signing-messages, "Manually generate a signature";
    the .NET SDK's SmsSignatureGenerator: "md5hash returns lowercase MD5 of query + secret; the HMAC
    variants return the uppercase HMAC of the query keyed by the secret"). Compare case-insensitively:
    the Python SDK's own signer sends lower-case HMACs."""
    query = "".join(
        f"&{key}={str(params[key]).replace('&', '_').replace('=', '_')}"
        for key in sorted(params)
        if key != "sig"
    )
    if method == "md5hash":
        return hashlib.md5((query + secret).encode()).hexdigest()  # noqa: S324 - Vonage's scheme
    return hmac.new(secret.encode(), query.encode(), method).hexdigest().upper()


class VonagePart:
    """One stored part: what was asked, its ``message-id``, and its outcome fixed at create (final
    ``status`` and ``err_code`` at ``end_at``). ``timeline()`` and ``status_callback`` are what the
    shared callback scheduler (``sandbox.callbacks``) reads."""

    __slots__ = (
        "account_ref",
        "client_ref",
        "created",
        "end_at",
        "err_code",
        "final_status",
        "form",
        "has_callbacks",
        "index",
        "network",
        "parts",
        "price",
        "request_id",
        "sender",
        "seq",
        "sid",
        "status_callback",
        "text",
        "to",
        "unicode",
    )

    def __init__(self, seq: int, sid: str, to: str, sender: str, text: str, created: float) -> None:
        self.seq = seq
        self.sid = sid  # the message-id
        self.to = to
        self.sender = sender
        self.text = text  # this part's text
        self.created = created
        self.unicode = False
        self.client_ref = ""
        self.account_ref = ""
        self.status_callback = ""  # the receipt URL: the request's callback, else the account's
        self.index = 1  # 1-based, of ``parts``
        self.parts = 1
        self.request_id = ""  # shared by the parts of one request
        self.network = ""
        self.price = 0.0
        self.end_at = created
        self.final_status = "delivered"
        self.err_code = 0
        self.form: dict[str, str] = {}
        self.has_callbacks = False

    def status_at(self, now: float) -> str:
        return self.final_status if now >= self.end_at else "accepted"

    def timeline(self) -> list[tuple[str, float]]:
        """The receipts Vonage sends for this part: one, with its final status."""
        return [(self.final_status, self.end_at)]


class VonageRequest:
    """The parts of one accepted send, as the callback scheduler sees them: one chain whose steps are the
    parts' receipts ("status" = the part's index), so ``callback_shuffle`` mixes the parts' order and
    ``callback_early_rate`` sends the first part's receipt before the answer."""

    __slots__ = ("has_callbacks", "intermediate", "parts", "sid", "status_callback")

    def __init__(self, parts: list[VonagePart], intermediate: str = "") -> None:
        self.parts = parts
        self.sid = parts[0].sid
        self.status_callback = parts[0].status_callback
        self.has_callbacks = False
        # "accepted" or "buffered": each part first gets that intermediate receipt at its create
        self.intermediate = intermediate

    def timeline(self) -> list[tuple[str, float]]:
        """Steps "<index>" (the part's final receipt) and, with ``intermediate``, "<index>:<status>"
        (an intermediate receipt) first, in time order."""
        steps = [(str(i), part.end_at) for i, part in enumerate(self.parts)]
        if self.intermediate:
            first = [(f"{i}:{self.intermediate}", part.created) for i, part in enumerate(self.parts)]
            steps = first + steps
        return steps
