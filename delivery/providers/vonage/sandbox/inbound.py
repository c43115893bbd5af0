"""Inbound SMS from the Vonage sandbox (``POST /_sandbox/inbound``; the framework's ``sandbox.inbound``):
Vonage's request to the account's inbound SMS webhook (developer.vonage.com/messaging/sms/guides/
inbound-sms, "Anatomy of an Inbound Message").

Fields: ``msisdn`` (the sender) and ``to`` (our virtual number), both without "+"; ``messageId`` (16
hex digits, like a sent part's); ``text``; ``type`` ``text`` or ``unicode`` (given, or ``unicode`` when
the text is not all GSM-7); ``keyword`` (the text's first word, upper-cased, as in the API reference's
example); ``message-timestamp`` ("The UTC±00:00 time when Vonage started to push this inbound message
to your webhook endpoint", ``YYYY-MM-DD HH:MM:SS``); ``api-key``. Signed when the account has a
signature secret (developer.vonage.com/getting-started/concepts/signing-messages): ``timestamp`` ("The
unix timestamp representation of message-timestamp": the first push's, on every attempt), ``nonce``
(new on every attempt) and ``sig`` over the rest, by ``signature_method``. Sent as the account's
webhook method (``receipt_method``: ``POST-JSON``, ``POST`` form or ``GET``), as the receipts are.

A long message arrives in parts, each a webhook of its own with its own ``messageId`` and
``concat`` "true", ``concat-ref`` (the sender's concatenation reference, shared by the parts; a byte
in the SMS header, counted per sender here), ``concat-total`` and ``concat-part`` (the guide's
"Concatenated messages"); the parts are split as the sandbox splits a sent message (``parts.py``:
GSM-7 153, UCS-2 67 per part) and sent in ``parts_order`` (e.g. ``[3, 1, 2]``), by default in order.

Retries: "you must send a 200 OK or 204 No Content response. If you don't, then Vonage will assume that
you have not received the message and will keep resending it for the next 24 hours" (the same page):
any other answer, or none, is retried after ``inbound_retry_backoff_ms``, doubled each time up to
``inbound_retry_max_backoff_ms``, for ``inbound_retry_window_seconds`` (Vonage documents no spacing).
``copies`` forces duplicates, each with the same ``messageId``. Must not import Django.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from delivery.providers.vonage.sandbox.parts import new_message_id, signature, split_parts
from sandbox.callbacks import FORM
from sandbox.gsm7 import _GSM7_BASIC, _GSM7_EXT
from sandbox.inbound import AskError, InboundAsk, InboundSender, Webhook

if TYPE_CHECKING:
    from delivery.providers.vonage.sandbox.state import VonageState

USER_AGENT = "Vonage-Sandbox-Inbound/1.0"
MAX_TEXT = 3200  # the sandbox's bound, as for a sent text
_NUMBER = re.compile(r"\+?[1-9][0-9]{6,14}")


def is_gsm7(text: str) -> bool:
    return all(c in _GSM7_BASIC or c in _GSM7_EXT for c in text)


def keyword_of(text: str) -> str:
    words = text.split()
    return words[0].upper() if words else ""


def _order(value: Any, parts: int) -> list[int]:
    if (
        not isinstance(value, list)
        or any(isinstance(i, bool) or not isinstance(i, int) for i in value)
        or sorted(value) != list(range(1, parts + 1))
    ):
        raise AskError("parts_order", f"must list the parts 1 to {parts} (the body's parts), each once")
    return value


class VonageInbound(InboundSender):
    state: VonageState
    EXTRA_KEYS = ("parts_order", "type")

    def reset(self) -> None:
        super().reset()
        self._refs: dict[str, int] = {}  # per sender: the last concat-ref

    def _texts(self, ask: InboundAsk) -> tuple[list[str], bool]:
        kind = ask.extra.get("type")
        if kind is not None and kind not in ("text", "unicode"):
            raise AskError("type", "must be text or unicode")
        unicode = kind == "unicode" or (kind is None and not is_gsm7(ask.body))
        return split_parts(ask.body, unicode), unicode

    def check(self, ask: InboundAsk) -> None:
        if not _NUMBER.fullmatch(ask.to):
            raise AskError("to", "must be our virtual number (E.164, with or without +)")
        if not ask.body or len(ask.body) > MAX_TEXT:
            raise AskError("body", f"must have 1 to {MAX_TEXT} characters")
        texts, _ = self._texts(ask)
        if "parts_order" in ask.extra:
            _order(ask.extra["parts_order"], len(texts))

    def plan(self, ask: InboundAsk) -> list[Webhook]:
        texts, unicode = self._texts(ask)
        order = _order(ask.extra["parts_order"], len(texts)) if "parts_order" in ask.extra else None
        msisdn, to = ask.from_.lstrip("+"), ask.to.lstrip("+")
        pushed = self.state.clock()
        base = {
            "msisdn": msisdn,
            "to": to,
            "type": "unicode" if unicode else "text",
            "message-timestamp": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(pushed)),
        }
        concat: dict[str, str] = {}
        if len(texts) > 1:
            ref = (self._refs.get(msisdn, int.from_bytes(os.urandom(1))) + 1) % 256
            self._refs[msisdn] = ref
            concat = {"concat": "true", "concat-ref": str(ref), "concat-total": str(len(texts))}
        webhooks = []
        ids = [new_message_id() for _ in texts]
        for number in order or range(1, len(texts) + 1):
            text = texts[number - 1]
            fields = {**base, "messageId": ids[number - 1], "text": text, "keyword": keyword_of(text)}
            if concat:
                fields.update(concat, **{"concat-part": str(number)})
            info = {"from": ask.from_, "to": ask.to, "text": text, "part": number, "parts": len(texts)}
            webhook = Webhook(ids[number - 1], ids[0], ask.url, fields, info)
            webhook.info["pushed"] = int(pushed)
            webhooks.append(webhook)
        return webhooks

    def build_request(self, webhook: Webhook, copy: int, attempt: int) -> tuple[str, str, dict, bytes]:
        st = self.state
        cfg = st.config
        params = {**webhook.fields, "api-key": st.api_key}
        if cfg.signature_secret:
            params["timestamp"] = str(webhook.info["pushed"])
            params["nonce"] = os.urandom(16).hex()
            params["sig"] = signature(params, cfg.signature_secret, cfg.signature_method)
        url = webhook.url
        headers = {"User-Agent": USER_AGENT}
        if cfg.receipt_method == "GET":
            return "GET", url + ("&" if "?" in url else "?") + urlencode(params), headers, b""
        if cfg.receipt_method == "POST":
            return "POST", url, {**headers, "Content-Type": FORM}, urlencode(params).encode()
        return "POST", url, {**headers, "Content-Type": "application/json"}, json.dumps(params).encode()

    def accepted(self, code: int) -> bool:
        return code in (200, 204)  # "you must send a 200 OK or 204 No Content response"

    def retry_delay(self, attempt: int, result: str, elapsed: float) -> float | None:
        cfg = self.state.config
        backoff = min(cfg.inbound_retry_backoff_ms * 2**attempt, cfg.inbound_retry_max_backoff_ms) / 1000.0
        if elapsed + backoff > cfg.inbound_retry_window_seconds:
            return None
        return backoff
