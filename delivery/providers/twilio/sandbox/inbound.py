"""Incoming messages from the Twilio sandbox (``POST /_sandbox/inbound``; the framework's
``sandbox.inbound``): Twilio's request to a number's "A message comes in" webhook URL, and what Twilio
does with the TwiML it is answered.

The request (twilio.com/docs/messaging/guides/webhook-request): a form POST (``application/x-www-form-
urlencoded``) with ``MessageSid`` (also as ``SmsMessageSid`` and ``SmsSid``), ``AccountSid``,
``MessagingServiceSid`` when the number is in a Messaging Service, ``From``, ``To``, ``Body``,
``NumMedia`` "0", ``NumSegments``, ``SmsStatus`` "received", ``ApiVersion`` and the geographic fields
``FromCity``/``FromState``/``FromZip``/``FromCountry`` and ``To*`` ("Twilio attempts to look up this
geographic data": only the country here, from the calling code, the rest empty), signed with
``X-Twilio-Signature`` like the status callbacks (``callbacks.py``, the same keys). One request per
message: Twilio reassembles a long incoming message before posting it ("Inbound messages over 160
characters are reassembled when the message is received", the Message resource's ``num_segments``), so
``parts_order`` is refused here.

Retries: Twilio does not retry a webhook that got an HTTP answer unless its URL's connection overrides
ask (``rc``/``rp``/``tt``, twilio.com/docs/usage/webhooks/webhooks-connection-overrides); the sandbox
applies its ``callback_retries``, ``callback_retry_policy``, ``callback_total_timeout_ms`` and
``callback_retry_backoff_ms``, as for status callbacks (by default: one retry, only when no connection
could be made). ``copies`` forces duplicates: each with its own ``I-Twilio-Idempotency-Token``, all
with the same ``MessageSid``.

The answer: each ``<Message>`` of the TwiML (``twiml.py``) is sent as an outbound message, from the
number the message came in on to its sender unless the verb says otherwise, and stored like a created
one: Twilio "creates a Message when ... Twilio executes a <Message> TwiML instruction" (the Message
resource's page, twilio.com/docs/messaging/api/message-resource), so a test finds the reply in
``GET .../Messages.json`` and in the inbound's ``replies``. Must not import Django.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from delivery.providers.twilio.sandbox import twiml
from delivery.providers.twilio.sandbox.callbacks import USER_AGENT
from delivery.providers.twilio.sandbox.config import _E164ISH, API_VERSION, MAX_BODY_CHARS
from delivery.providers.twilio.sandbox.lifecycle import count_segments
from delivery.providers.twilio.sandbox.paging import Refused
from sandbox.callbacks import FORM
from sandbox.inbound import AskError, InboundAsk, InboundSender, Webhook

if TYPE_CHECKING:
    from delivery.providers.twilio.sandbox.state import SandboxState

SERVICE_SID = re.compile(r"MG[0-9a-f]{32}")
# Twilio error 14103 "Invalid Body" (twilio.com/docs/api/errors/14103): a <Message> without text
INVALID_BODY = 14103
# ISO country by calling code, for FromCountry / ToCountry (the sandbox's own short table)
_COUNTRIES = (("44", "GB"), ("49", "DE"), ("33", "FR"), ("34", "ES"), ("39", "IT"), ("61", "AU"), ("1", "US"))


def country_of(number: str) -> str:
    digits = number.lstrip("+")
    return next((iso for prefix, iso in _COUNTRIES if digits.startswith(prefix)), "")


def inbound_params(
    account_sid: str, sid: str, from_: str, to: str, body: str, service_sid: str
) -> dict[str, str]:
    """The form of Twilio's request to the incoming message webhook."""
    params = {
        "ToCountry": country_of(to),
        "ToState": "",
        "SmsMessageSid": sid,
        "NumMedia": "0",
        "ToCity": "",
        "FromZip": "",
        "SmsSid": sid,
        "FromState": "",
        "SmsStatus": "received",
        "FromCity": "",
        "Body": body,
        "FromCountry": country_of(from_),
        "To": to,
        "ToZip": "",
        "NumSegments": str(count_segments(body)),
        "MessageSid": sid,
        "AccountSid": account_sid,
        "From": from_,
        "ApiVersion": API_VERSION,
    }
    if service_sid:
        params["MessagingServiceSid"] = service_sid
    return params


class TwilioInbound(InboundSender):
    state: SandboxState
    EXTRA_KEYS = ("messaging_service_sid", "parts_order")

    def check(self, ask: InboundAsk) -> None:
        if "parts_order" in ask.extra:
            raise AskError(
                "parts_order", "Twilio reassembles a long incoming message: one webhook per message"
            )
        if len(ask.body) > MAX_BODY_CHARS:
            raise AskError("body", f"at most {MAX_BODY_CHARS} characters")
        if not (_E164ISH.fullmatch(ask.to) and ask.to.startswith("+")) and not SERVICE_SID.fullmatch(ask.to):
            raise AskError("to", "must be an E.164 number or a Messaging Service sid (MG...)")
        service = ask.extra.get("messaging_service_sid", "")
        if service and not (isinstance(service, str) and SERVICE_SID.fullmatch(service)):
            raise AskError("messaging_service_sid", "must be MG and 32 hex digits")

    def plan(self, ask: InboundAsk) -> list[Webhook]:
        st = self.state
        to, service = ask.to, ask.extra.get("messaging_service_sid", "")
        if SERVICE_SID.fullmatch(to):  # a number of the service's (its sender in this sandbox)
            to, service = st.service_sender(to), to
        sid = "SM" + os.urandom(16).hex()
        fields = inbound_params(st.account_sid, sid, ask.from_, to, ask.body, service)
        info = {"from": ask.from_, "to": to, "body": ask.body, "messaging_service_sid": service or None}
        return [Webhook(sid, sid, ask.url, fields, info)]

    def build_request(self, webhook: Webhook, copy: int, attempt: int) -> tuple[str, str, dict, bytes]:
        params = webhook.fields
        # kept across a copy's retries, new for every copy (as for the status callbacks)
        token = hashlib.sha256(f"{webhook.id}:{copy}".encode()).hexdigest()[:32]
        headers = {
            "Content-Type": FORM,
            "User-Agent": USER_AGENT,
            "I-Twilio-Idempotency-Token": token,
            **self.state.callbacks.signature_headers(webhook.url, params),
        }
        return "POST", webhook.url, headers, urlencode(params).encode()

    def retry_delay(self, attempt: int, result: str, elapsed: float) -> float | None:
        cfg = self.state.config
        if result not in self.state.retry_policy or attempt >= cfg.callback_retries:
            return None
        backoff = cfg.callback_retry_backoff_ms / 1000.0 * 2**attempt
        total = cfg.callback_total_timeout_ms / 1000.0
        if total > 0 and elapsed + backoff >= total:
            return None
        return backoff

    def answered(self, webhook: Webhook, code: int, body: str) -> None:
        """Execute the answer's ``<Message>`` verbs: each stored as a message sent from the number the
        message came in on (its id in ``replies``), or the Twilio error that stopped it."""
        try:
            replies, warnings = twiml.messages(body)
        except twiml.TwimlError as exc:
            webhook.replies.append({"error_code": exc.code, "error": str(exc)})
            return
        webhook.replies.extend({"error_code": code} for code in warnings)
        fields = webhook.fields
        for reply in replies:
            to = reply.to or fields["From"]
            from_ = reply.from_ or fields["To"]
            if not reply.body or len(reply.body) > MAX_BODY_CHARS:
                webhook.replies.append({"error_code": INVALID_BODY, "to": to, "from": from_})
                continue
            try:
                message = self.state.store(
                    to, from_, reply.body, fields.get("MessagingServiceSid", ""), reply.status_callback
                )
            except Refused as exc:  # an opted-out recipient (21610) or a full queue (21611)
                webhook.replies.append({"error_code": exc.code, "to": to, "from": from_})
                continue
            webhook.replies.append({"sid": message.sid, "to": to, "from": from_, "body": reply.body})
