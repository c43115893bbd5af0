"""The Twilio adapter's client side: its settings as read at each call (``_Conf``), the SDK clients built
from them, the asyncio runtime that submits (``_AsyncRuntime``), and the readers that turn an SDK answer
or exception into a ``SubmitResult`` or a ``ProviderMessage``. Only the Twilio package imports it."""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
from django.conf import settings
from twilio.rest import Client

from delivery.providers.base import (
    ErrorClass,
    Outcome,
    ProviderMessage,
    SubmitResult,
    redact,
)
from delivery.providers.twilio.http import (
    TWILIO_API_ORIGIN,
    BaseUrlAsyncHttpClient,
    Call,
)


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(seconds, 0.0)


def _client(conf: _Conf, http_client: Any) -> Client:
    # With an API key, the key authenticates and the account SID only names the account in each URL
    # (Client(key_sid, key_secret, account_sid), twilio.com/docs/iam/api-keys): a wrong account SID then
    # answers 404 / 20404 rather than 401.
    client = Client(
        username=conf.api_key_sid or conf.account_sid,
        password=conf.api_key_secret if conf.api_key_sid else conf.auth_token,
        account_sid=conf.account_sid,
        http_client=http_client,
    )
    # TWILIO_API_BASE_URL is the single source of the host: ignore TWILIO_EDGE / TWILIO_REGION.
    client.edge = None
    client.region = None
    return client


@dataclass(frozen=True)
class _Conf:
    account_sid: str
    auth_token: str
    base_url: str
    api_key_sid: str
    api_key_secret: str
    timeout: float
    concurrency: int

    @classmethod
    def current(cls, prefix: str = "TWILIO") -> _Conf:
        return cls(
            account_sid=_setting(prefix, "ACCOUNT_SID"),
            auth_token=_setting(prefix, "AUTH_TOKEN"),
            api_key_sid=_setting(prefix, "API_KEY_SID"),
            api_key_secret=_setting(prefix, "API_KEY_SECRET"),
            base_url=(_setting(prefix, "API_BASE_URL") or TWILIO_API_ORIGIN).rstrip("/"),
            timeout=float(_setting(prefix, "TIMEOUT_SECONDS")),
            concurrency=max(int(settings.SEND_CONCURRENCY), 1),
        )


def _setting(prefix: str, key: str):
    """``<prefix>_<key>`` (a second Twilio account is a second prefix, e.g. TWILIO_EU_ACCOUNT_SID), with
    the shared ``TWILIO_<key>`` for what an account need not set itself (timeout, base URL, keys)."""
    name = f"{prefix}_{key}"
    if key in ("ACCOUNT_SID", "AUTH_TOKEN"):
        return getattr(settings, name)
    # A key, or a token being rotated out, belongs to one account: never the shared one.
    if key in ("API_KEY_SID", "API_KEY_SECRET", "AUTH_TOKEN_PREVIOUS"):
        return getattr(settings, name, "")
    return getattr(settings, name, getattr(settings, f"TWILIO_{key}"))


# What the SDK's messages.create_async sends with the form (twilio/rest/api/v2010/account/message).
_FORM_HEADERS = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}


class _AsyncRuntime:
    """One per process and settings: the async client (its pool lives on the loop) and the semaphore."""

    def __init__(self, conf: _Conf, loop: asyncio.AbstractEventLoop) -> None:
        self.conf = conf
        self.loop = loop
        self.http = BaseUrlAsyncHttpClient(
            base_url=conf.base_url, timeout=conf.timeout, max_connections=conf.concurrency
        )
        self.client = _client(conf, self.http)
        self.semaphore = asyncio.Semaphore(conf.concurrency)
        self.tasks: set[asyncio.Task] = set()  # submissions started by submit_each, until done
        self._messages_uri = f"/Accounts/{conf.account_sid}/Messages.json"

    async def create_message(self, data: dict[str, Any]) -> dict[str, Any]:
        """POST a Message through the SDK's lower-level request API (``Version.create_async``: the same
        request, URL, headers, auth and TwilioRestException on an error answer as
        ``messages.create_async``), keeping the answer as the parsed JSON. ``messages.create_async`` also
        runs ``values.of`` over its 27 parameters and builds a ``MessageInstance`` (dates, prices) of
        which only the sid, status and segments are read: 9-20% of the SDK's CPU per request
        (``python -m bench sdk``, docs/benchmarks.md). A 2xx answer that is not a JSON object gives {}
        (no sid: uncertain)."""
        payload = await self.client.api.v2010.create_async(
            "POST", self._messages_uri, data=data, headers=_FORM_HEADERS
        )
        return payload if isinstance(payload, dict) else {}


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _error_payload(text: str) -> dict:
    try:
        payload = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return payload if isinstance(payload, dict) else {}


def _from_exception(exc: Exception, call: Call, latency_ms: float) -> SubmitResult:
    if call.status is not None and 200 <= call.status < 300:
        outcome = Outcome.UNCERTAIN  # taken, but the answer was unreadable
    elif isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError) or not call.sent:
        outcome = Outcome.TRANSIENT  # the request never left this process
    else:
        outcome = Outcome.UNCERTAIN  # sent; no (readable) answer
    text = str(exc)
    message = redact(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)
    return SubmitResult(
        outcome=outcome,
        error_message=message,
        http_status=call.status,
        latency_ms=latency_ms,
        error_class=ErrorClass.TRANSIENT if outcome == Outcome.TRANSIENT else None,
        error_title="network error before the request was sent" if outcome == Outcome.TRANSIENT else "",
        response={"http_status": call.status, "exception": type(exc).__name__, "request_sent": call.sent},
    )


def _provider_message(m: Any) -> ProviderMessage:
    return ProviderMessage(
        provider_message_id=m.sid or "",
        to=m.to or "",
        from_number=m.from_ or "",
        body=m.body or "",
        status=str(m.status or ""),
        date_created=m.date_created,
        error_code="" if m.error_code in (None, "", 0) else str(m.error_code),
        sender_pool=m.messaging_service_sid or "",
    )
