"""Status callbacks from the sandbox to the message's ``StatusCallback`` URL, signed like Twilio's.

For every stored message with a ``StatusCallback`` (while ``callbacks_enabled``), the sandbox POSTs
Twilio's form for each status change of the message's lifecycle (``lifecycle.py``), in Twilio's order
(Twilio docs, "Outbound Message Status in Status Callbacks"): none for the initial status; ``queued``
when a Messaging Service send gets its sender; then ``sent`` and ``delivered`` or ``undelivered``
(ErrorCode 30003), or a single ``failed`` (ErrorCode 30008, 30001, 30036 or 21610) that never follows a
``sent``. No ``sending``. ``delivered`` and ``undelivered`` carry ``RawDlrDoneDate`` (YYMMDDhhmm, UTC, the
final status's time). The store shows each status from its own instant on, whatever the callbacks do: a
dropped or refused callback changes nothing there (the provider knows, the receiver does not).

Timing, copies, shuffle, drops, early callbacks and retries (``callback_*`` in ``SandboxConfig``, after
Twilio's webhook connection overrides ``rc``, ``rp`` and ``tt``) are the framework's
(``sandbox.callbacks.StatusCallbackHook``); Twilio does not document its own retry spacing. This hook
builds each callback: Twilio's signed form POST.

Signatures (twilio.com/docs/usage/webhooks/webhooks-security): ``X-Twilio-Signature`` is
base64(HMAC-SHA1(auth token, URL + sorted params)); with ``callback_shared_key_id`` and
``callback_shared_key_secret`` set it is HMAC-SHA256 with the secret over the same string, and the
request carries ``X-Twilio-Webhooks-Signature-Settings: key=<id>,algorithm=HMAC_SHA256`` (Twilio's
SharedKey scheme, twilio.com/docs/usage/webhooks/webhook-shared-keys and the installed SDK's
``twilio/request_validator.py``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from delivery.providers.twilio.sandbox.lifecycle import dlr_done_date
from sandbox.callbacks import FORM, StatusCallbackHook

if TYPE_CHECKING:
    from delivery.providers.twilio.sandbox.lifecycle import SandboxMessage

API_VERSION = "2010-04-01"
USER_AGENT = "TwilioProxy/1.1"
SIGNATURE_SETTINGS_HEADER = "X-Twilio-Webhooks-Signature-Settings"
_HASHES = {"HMAC_SHA1": hashlib.sha1, "HMAC_SHA256": hashlib.sha256}


def twilio_signature(secret: str, url: str, params: dict[str, str], algorithm: str = "HMAC_SHA1") -> str:
    """``X-Twilio-Signature``: base64(HMAC(secret, url + key1 + value1 + key2 + ...)), keys sorted, over
    the exact URL that is requested (query string included). The secret is the auth token (HMAC_SHA1)
    or a SharedKey's secret (HMAC_SHA256)."""
    payload = url + "".join(key + params[key] for key in sorted(params))
    digest = hmac.new(secret.encode(), payload.encode(), _HASHES[algorithm]).digest()
    return base64.b64encode(digest).decode()


def _event_time(message: SandboxMessage, status: str) -> float:
    if status == "queued":
        return message.assign_at
    if status == "sent":
        return message.release_at
    return message.end_at


def callback_params(account_sid: str, message: SandboxMessage, status: str) -> dict[str, str]:
    """The form Twilio posts for an outbound SMS status change (Twilio's message-resource doc, "Twilio's
    request to the StatusCallback URL"; ``SmsSid``/``SmsStatus`` as captured Twilio payloads show them)."""
    params = {
        "AccountSid": account_sid,
        "ApiVersion": API_VERSION,
        "MessageSid": message.sid,
        "MessageStatus": status,
        "SmsSid": message.sid,
        "SmsStatus": status,
        "To": message.to,
    }
    from_ = message.from_at(_event_time(message, status))
    if from_ is not None:
        params["From"] = from_
    if message.messaging_service_sid:
        params["MessagingServiceSid"] = message.messaging_service_sid
    if status in ("failed", "undelivered") and message.error_code is not None:
        params["ErrorCode"] = str(message.error_code)
    if status in ("delivered", "undelivered"):
        params["RawDlrDoneDate"] = dlr_done_date(message.end_at)
    return params


class TwilioCallbackHook(StatusCallbackHook):
    """The framework's scheduler (``sandbox.callbacks``) with Twilio's signed status-callback form."""

    def signature_headers(self, url: str, params: dict[str, str]) -> dict[str, str]:
        """The signature headers of a request to ``url`` with ``params`` (status callbacks and the incoming
        message webhook, ``inbound.py``, are signed alike)."""
        st = self.state
        cfg = st.config
        if cfg.callback_shared_key_id and cfg.callback_shared_key_secret:
            return {
                "X-Twilio-Signature": twilio_signature(
                    cfg.callback_shared_key_secret, url, params, "HMAC_SHA256"
                ),
                SIGNATURE_SETTINGS_HEADER: f"key={cfg.callback_shared_key_id},algorithm=HMAC_SHA256",
            }
        return {"X-Twilio-Signature": twilio_signature(st.signing_token(), url, params)}

    def build_request(self, message: SandboxMessage, status: str, token: str) -> tuple[str, str, dict, bytes]:
        """(method, URL, headers, body) of one callback: Twilio's signed form POST."""
        st = self.state
        url = message.status_callback
        params = callback_params(st.account_sid, message, status)
        headers = {
            "Content-Type": FORM,
            "User-Agent": USER_AGENT,
            "I-Twilio-Idempotency-Token": token,
            **self.signature_headers(url, params),
        }
        return "POST", url, headers, urlencode(params).encode()
