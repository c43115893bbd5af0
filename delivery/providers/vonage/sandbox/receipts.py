"""Delivery receipts from the Vonage sandbox: one per part, to the request's ``callback`` URL or the
account's receipt URL (``receipt_url``), signed when the account has a signature secret.

The fields (developer.vonage.com/messaging/sms/guides/delivery-receipts, "Understanding the delivery
receipt", and the SMS API reference's delivery-receipt webhook, developer.vonage.com/en/api/sms):
``msisdn`` (the recipient), ``to`` (the sender), ``network-code``, ``messageId``, ``price``, ``status``
(delivered, expired, failed, rejected, accepted, buffered or unknown), ``scts`` (YYMMDDHHMM, UTC),
``err-code`` ("0" when delivered), ``api-key``, ``message-timestamp`` ("YYYY-MM-DD HH:MM:SS", UTC) and,
when the send had one, ``client-ref``. Sent as JSON (``receipt_method`` ``POST-JSON``, the default), a
form POST or a GET with the fields in the query, as the dashboard's webhook method allows.

Signed receipts (developer.vonage.com/getting-started/concepts/signing-messages, "Validate the signature
on incoming messages"): ``timestamp`` (unix seconds), ``nonce`` and ``sig`` are added, ``sig`` computed
over every other field (``parts.signature``) with the account's method.

Scheduling, copies, shuffle, drops, early receipts, retries and the counters are the framework's
(``sandbox.callbacks.StatusCallbackHook``); only the request built for each receipt differs.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from delivery.providers.vonage.sandbox.parts import VonagePart, VonageRequest, signature
from sandbox.callbacks import FORM, StatusCallbackHook

if TYPE_CHECKING:
    from delivery.providers.vonage.sandbox.state import VonageState

USER_AGENT = "Vonage-Sandbox-DLR/1.0"


def receipt_params(api_key: str, part: VonagePart, status: str, err_code: int) -> dict[str, str]:
    at = time.gmtime(part.end_at)
    params = {
        "msisdn": part.to,
        "to": part.sender,
        "network-code": part.network,
        "messageId": part.sid,
        "price": f"{part.price:.8f}",
        "status": status,
        "scts": time.strftime("%y%m%d%H%M", at),
        "err-code": str(err_code),
        "api-key": api_key,
        "message-timestamp": time.strftime("%Y-%m-%d %H:%M:%S", at),
    }
    if part.client_ref:
        params["client-ref"] = part.client_ref
    return params


class ReceiptHook(StatusCallbackHook):
    state: VonageState

    def build_request(self, message, status: str, token: str) -> tuple[str, str, dict, bytes]:
        st = self.state
        cfg = st.config
        if isinstance(message, VonageRequest):
            index, _, intermediate = status.partition(":")
            part = message.parts[int(index)]
            status, err_code = (intermediate, 0) if intermediate else (part.final_status, part.err_code)
        else:  # a part's own receipt again (POST /_sandbox/callbacks/replay with its message-id)
            part, err_code = message, message.err_code
        params = receipt_params(st.api_key, part, status, err_code)
        if cfg.signature_secret:
            params["timestamp"] = str(int(st.clock()))
            params["nonce"] = os.urandom(16).hex()
            params["sig"] = signature(params, cfg.signature_secret, cfg.signature_method)
        url = part.status_callback
        headers = {"User-Agent": USER_AGENT}
        if cfg.receipt_method == "GET":
            joiner = "&" if "?" in url else "?"
            return "GET", url + joiner + urlencode(params), headers, b""
        if cfg.receipt_method == "POST":
            return "POST", url, {**headers, "Content-Type": FORM}, urlencode(params).encode()
        return "POST", url, {**headers, "Content-Type": "application/json"}, json.dumps(params).encode()
