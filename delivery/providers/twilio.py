"""The Twilio adapter: the only module that imports the ``twilio`` SDK.

Submissions go through the SDK's asyncio client (``messages.create_async``) on ONE private event loop per
process, run by a daemon thread, with ONE aiohttp session (connection pool) on it; ``submit_many`` is
synchronous for the caller and may be called from any thread. Look-ups (``fetch``,
``find_submissions``) use the SDK's synchronous client.

The API is reached by base URL only: both HTTP clients replace the ``https://api.twilio.com`` prefix of
every request URL with ``settings.TWILIO_API_BASE_URL`` (which may be Twilio itself). Settings are read
at every call; when they change, the clients are rebuilt.

Outcomes:

* 2xx -> ACCEPTED (sid, status).
* 429 -> TRANSIENT, ``retry_after`` from the Retry-After header; 408, 500, 503 and other 5xx ->
  TRANSIENT (Twilio did not take the message), except 502/504, which a gateway in front of Twilio
  answers after forwarding the request -> UNCERTAIN.
* other 4xx -> REJECTED with Twilio's ``code``.
* the request was never written (connection refused, DNS, connect timeout, no free connection)
  -> TRANSIENT; it was written but no response came back (read timeout, reset, disconnect) -> UNCERTAIN.
  "Written" is observed with aiohttp's ``on_request_headers_sent`` trace signal, per request.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import contextlib
import contextvars
import email.utils
import json
import logging
import math
import os
import re
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlencode

import aiohttp
from django.conf import settings
from twilio.base.exceptions import TwilioRestException
from twilio.http.async_http_client import AsyncTwilioHttpClient
from twilio.http.http_client import TwilioHttpClient
from twilio.http.response import Response as TwilioResponse
from twilio.request_validator import RequestValidator
from twilio.rest import Client

from delivery.providers import ProviderQueryError
from delivery.providers.base import Outcome, ProviderAdapter, ProviderMessage, Submission, SubmitResult

logger = logging.getLogger(__name__)

TWILIO_API_ORIGIN = "https://api.twilio.com"
KEEPALIVE_SECONDS = 15.0  # below Twilio's / the sandbox's idle timeout, so a pooled socket is rarely stale
LIST_PAGE_SIZE = 1000

STATUS_MAP = {
    "accepted": "queued",
    "queued": "queued",
    "scheduled": "queued",
    "sending": "sending",
    "sent": "sent",
    "delivered": "delivered",
    "undelivered": "undelivered",
    "failed": "failed",
    "canceled": "failed",
    "read": "delivered",
}

_PHONEISH = re.compile(r"\+?\d[\d\s().-]{4,}\d")


def redact(text: str) -> str:
    """Mask anything that looks like a phone number, keeping its last two digits."""
    return _PHONEISH.sub(lambda m: "***" + re.sub(r"\D", "", m.group())[-2:], text or "")


def rewrite_url(url: str, base_url: str) -> str:
    """``https://api.twilio.com/...`` -> ``{base_url}/...``; anything else is left alone."""
    if base_url and base_url != TWILIO_API_ORIGIN and url.startswith(TWILIO_API_ORIGIN):
        rest = url[len(TWILIO_API_ORIGIN) :]
        if not rest or rest[0] in "/?":
            return base_url + rest
    return url


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


# --- HTTP clients ----------------------------------------------------------------------------------
class _Call:
    """What the HTTP layer saw for one submission (the SDK's exceptions carry no headers)."""

    __slots__ = ("headers", "sent", "status", "text")

    def __init__(self) -> None:
        self.sent = False  # request headers were handed to the transport
        self.status: int | None = None
        self.headers: Mapping[str, str] = {}
        self.text = ""


_current_call: contextvars.ContextVar[_Call | None] = contextvars.ContextVar(
    "smsgw_twilio_call", default=None
)


async def _on_request_headers_sent(session: aiohttp.ClientSession, ctx: SimpleNamespace, params: Any) -> None:
    call = getattr(ctx, "trace_request_ctx", None)
    if isinstance(call, _Call):
        call.sent = True


def _form_body(data: Mapping[str, Any] | None) -> str:
    pairs: list[tuple[str, str]] = []
    for key, value in (data or {}).items():
        for item in value if isinstance(value, list | tuple) else (value,):
            pairs.append((key, item if isinstance(item, str) else str(item)))
    return urlencode(pairs)


class BaseUrlAsyncHttpClient(AsyncTwilioHttpClient):
    """The SDK's aiohttp client, reaching ``base_url`` instead of api.twilio.com, with one pooled session
    created lazily on the loop that uses it, a real timeout, and no request logging (numbers are PII)."""

    def __init__(self, *, base_url: str, timeout: float, max_connections: int) -> None:
        super().__init__(pool_connections=False, timeout=timeout)
        self.base_url = base_url.rstrip("/")
        self.max_connections = max_connections
        self.session: aiohttp.ClientSession | None = None
        self._auth_cache: tuple[tuple[str, str] | None, str] = (None, "")

    def _session(self) -> aiohttp.ClientSession:
        if self.session is None or self.session.closed:
            trace = aiohttp.TraceConfig()
            trace.on_request_headers_sent.append(_on_request_headers_sent)
            connector = aiohttp.TCPConnector(
                limit=self.max_connections, keepalive_timeout=KEEPALIVE_SECONDS, ttl_dns_cache=300
            )
            self.session = aiohttp.ClientSession(connector=connector, trace_configs=[trace])
        return self.session

    async def request(
        self,
        method: str,
        url: str,
        params: dict[str, object] | None = None,
        data: dict[str, object] | None = None,
        headers: dict[str, str] | None = None,
        auth: tuple[str, str] | None = None,
        timeout: float | None = None,
        allow_redirects: bool = False,
    ) -> TwilioResponse:
        seconds = timeout or self.timeout
        headers = dict(headers or {})
        body: str | None = None
        if data:
            is_json = "json" in headers.get("Content-Type", "")
            body = json.dumps(data) if is_json else _form_body(data)
        if auth:
            headers["Authorization"] = self._basic_auth(auth)
        call = _current_call.get()
        async with self._session().request(
            method.upper(),
            rewrite_url(url, self.base_url),
            params={k: str(v) for k, v in params.items()} if params else None,
            data=body,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=seconds, sock_connect=seconds),
            allow_redirects=allow_redirects,
            trace_request_ctx=call,
        ) as response:
            raw = await response.read()
        text = raw.decode("utf-8", "replace")
        if call is not None:
            call.status = response.status
            call.headers = response.headers
            call.text = text
        return TwilioResponse(response.status, text, response.headers)

    def _basic_auth(self, auth: tuple[str, str]) -> str:
        if self._auth_cache[0] != auth:
            encoded = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
            self._auth_cache = (auth, f"Basic {encoded}")
        return self._auth_cache[1]

    async def close(self) -> None:
        if self.session is not None and not self.session.closed:
            await self.session.close()


class BaseUrlHttpClient(TwilioHttpClient):
    """The SDK's requests client, reaching ``base_url`` instead of api.twilio.com, without logging."""

    def __init__(self, *, base_url: str, timeout: float) -> None:
        super().__init__(timeout=timeout)
        self.base_url = base_url.rstrip("/")

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> TwilioResponse:
        return super().request(method, rewrite_url(url, self.base_url), *args, **kwargs)

    def log_request(self, kwargs: dict[str, Any]) -> None:
        return None

    def log_response(self, status_code: int, response: Any) -> None:
        return None


def _client(conf: _Conf, http_client: Any) -> Client:
    client = Client(
        username=conf.account_sid,
        password=conf.auth_token,
        account_sid=conf.account_sid,
        http_client=http_client,
    )
    # TWILIO_API_BASE_URL is the single source of the host: ignore TWILIO_EDGE / TWILIO_REGION.
    client.edge = None
    client.region = None
    return client


# --- the adapter -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Conf:
    account_sid: str
    auth_token: str
    base_url: str
    timeout: float
    concurrency: int

    @classmethod
    def current(cls) -> _Conf:
        return cls(
            account_sid=settings.TWILIO_ACCOUNT_SID,
            auth_token=settings.TWILIO_AUTH_TOKEN,
            base_url=(settings.TWILIO_API_BASE_URL or TWILIO_API_ORIGIN).rstrip("/"),
            timeout=float(settings.TWILIO_TIMEOUT_SECONDS),
            concurrency=max(int(settings.SEND_CONCURRENCY), 1),
        )


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


class TwilioAdapter(ProviderAdapter):
    name = "twilio"

    def __init__(self) -> None:
        self._reset_process_state()
        ref = weakref.ref(self)

        def after_fork_in_child() -> None:
            adapter = ref()
            if adapter is not None:
                adapter._reset_process_state()

        os.register_at_fork(after_in_child=after_fork_in_child)
        atexit.register(_close_ref, ref)

    def _reset_process_state(self) -> None:
        # after a fork the parent's loop thread does not exist here: start over (without closing what
        # belongs to the parent's sockets)
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runtime: _AsyncRuntime | None = None
        self._sync_conf: _Conf | None = None
        self._sync_client: Client | None = None
        self._validators: dict[str, RequestValidator] = {}

    # -- plumbing -----------------------------------------------------------------------------------
    def _ensure_runtime(self, conf: _Conf) -> _AsyncRuntime:
        if self._pid != os.getpid():
            self._reset_process_state()
        with self._lock:
            if self._loop is None or self._thread is None or not self._thread.is_alive():
                self._loop, self._thread = _start_loop_thread()
                self._runtime = None
            runtime = self._runtime
            if runtime is None or runtime.conf != conf:
                if runtime is not None:  # settings changed: let the old pool go
                    asyncio.run_coroutine_threadsafe(runtime.http.close(), self._loop)
                runtime = self._runtime = _AsyncRuntime(conf, self._loop)
            return runtime

    def _sync(self) -> Client:
        conf = _Conf.current()
        if self._pid != os.getpid():
            self._reset_process_state()
        with self._lock:
            if self._sync_client is None or self._sync_conf != conf:
                http = BaseUrlHttpClient(base_url=conf.base_url, timeout=conf.timeout)
                self._sync_client = _client(conf, http)
                self._sync_conf = conf
            return self._sync_client

    def close(self) -> None:
        """Close the pool and stop the loop thread (also run at exit). The adapter stays usable: the
        next call starts them again."""
        with self._lock:
            loop, thread, runtime = self._loop, self._thread, self._runtime
            self._loop = self._thread = self._runtime = None
        if loop is None or thread is None or not thread.is_alive() or self._pid != os.getpid():
            return
        if runtime is not None:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(runtime.http.close(), loop).result(timeout=2)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=2)

    # -- submit -------------------------------------------------------------------------------------
    def submit_many(self, submissions: list[Submission]) -> list[SubmitResult]:
        if not submissions:
            return []
        runtime = self._ensure_runtime(_Conf.current())
        future = asyncio.run_coroutine_threadsafe(self._submit_all(runtime, submissions), runtime.loop)
        try:
            return future.result()
        except BaseException:
            # the caller is giving up (e.g. a task time limit): do not start the queued rest later
            future.cancel()
            raise

    async def _submit_all(self, runtime: _AsyncRuntime, submissions: list[Submission]) -> list[SubmitResult]:
        return list(await asyncio.gather(*(self._submit_one(runtime, s) for s in submissions)))

    async def _submit_one(self, runtime: _AsyncRuntime, submission: Submission) -> SubmitResult:
        async with runtime.semaphore:
            call = _Call()
            _current_call.set(call)  # this coroutine runs in its own task, hence its own context
            kwargs: dict[str, str] = {"to": submission.to, "body": submission.body}
            if submission.from_number:
                kwargs["from_"] = submission.from_number
            if submission.messaging_service_sid:
                kwargs["messaging_service_sid"] = submission.messaging_service_sid
            if submission.status_callback:
                kwargs["status_callback"] = submission.status_callback
            # Twilio's Messages API has no idempotency key: submission.idempotency_token is not sent;
            # duplicates after an UNCERTAIN outcome are prevented by reconciling (find_submissions).
            started = time.perf_counter()
            try:
                message = await runtime.client.messages.create_async(**kwargs)
            except TwilioRestException as exc:
                return _from_error_response(exc, call, _elapsed_ms(started))
            except Exception as exc:
                return _from_exception(exc, call, _elapsed_ms(started))
            sid = message.sid or ""
            status = str(message.status or "")
            if not sid:  # a 2xx without a sid: it was (probably) taken, but we cannot track it
                return SubmitResult(
                    outcome=Outcome.UNCERTAIN,
                    error_message="success response without a message sid",
                    http_status=call.status,
                    latency_ms=_elapsed_ms(started),
                    response={"http_status": call.status},
                )
            return SubmitResult(
                outcome=Outcome.ACCEPTED,
                provider_message_id=sid,
                provider_status=status,
                http_status=call.status,
                latency_ms=_elapsed_ms(started),
                response={
                    "http_status": call.status,
                    "sid": sid,
                    "status": status,
                    "num_segments": message.num_segments,
                },
            )

    # -- look-ups -----------------------------------------------------------------------------------
    def fetch(self, provider_message_id: str) -> ProviderMessage | None:
        client = self._sync()
        try:
            message = client.messages(provider_message_id).fetch()
        except TwilioRestException as exc:
            if exc.status == 404:
                return None
            raise ProviderQueryError(f"twilio fetch failed: HTTP {exc.status} code {exc.code}") from exc
        except Exception as exc:
            raise ProviderQueryError(f"twilio fetch failed: {type(exc).__name__}") from exc
        return _provider_message(message)

    def find_submissions(
        self, *, to: str, from_number: str, messaging_service_sid: str, since: datetime
    ) -> list[ProviderMessage]:
        since_utc = since.replace(tzinfo=UTC) if since.tzinfo is None else since.astimezone(UTC)
        since_utc = since_utc.replace(microsecond=0)  # Twilio's dates have whole seconds
        client = self._sync()
        filters: dict[str, Any] = {"to": to, "date_sent_after": since_utc, "page_size": LIST_PAGE_SIZE}
        if from_number:
            filters["from_"] = from_number
        try:
            found = list(client.messages.stream(**filters))
        except TwilioRestException as exc:
            raise ProviderQueryError(f"twilio list failed: HTTP {exc.status} code {exc.code}") from exc
        except Exception as exc:
            raise ProviderQueryError(f"twilio list failed: {type(exc).__name__}") from exc
        out = []
        for m in found:
            if m.to != to:
                continue
            if from_number:
                if m.from_ != from_number:
                    continue
            elif messaging_service_sid and m.messaging_service_sid != messaging_service_sid:
                continue
            if m.date_created is not None and m.date_created < since_utc:
                continue
            out.append(_provider_message(m))
        return out

    # -- statuses and callbacks ---------------------------------------------------------------------
    def normalize_status(self, raw_status: str) -> str:
        return STATUS_MAP.get((raw_status or "").strip().lower(), "")

    def validate_callback(self, url: str, params: dict, signature: str) -> bool:
        token = settings.TWILIO_AUTH_TOKEN
        if not signature or not token:
            return False
        validator = self._validators.get(token)
        if validator is None:
            validator = self._validators[token] = RequestValidator(token)
        return bool(validator.validate(url, params, signature))


def _close_ref(ref: weakref.ref) -> None:
    adapter = ref()
    if adapter is not None:
        with contextlib.suppress(Exception):
            adapter.close()


def _new_loop() -> asyncio.AbstractEventLoop:
    # uvloop roughly halves the event loop's and aiohttp's per-request CPU, which is most of a send
    # worker's CPU at thousands of submissions per second; the stdlib loop is the portable fallback.
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency on Linux/macOS
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _start_loop_thread() -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    loop = _new_loop()
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    thread = threading.Thread(target=run, name="twilio-adapter-loop", daemon=True)
    thread.start()
    ready.wait()
    return loop, thread


def _elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000.0, 3)


def _error_payload(text: str) -> dict:
    try:
        payload = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return payload if isinstance(payload, dict) else {}


def _from_error_response(exc: TwilioRestException, call: _Call, latency_ms: float) -> SubmitResult:
    status = int(call.status or exc.status or 0)
    payload = _error_payload(call.text)
    code = payload.get("code", exc.code)
    error_code = "" if code in (None, "", status) else str(code)
    message = redact(str(payload.get("message") or exc.msg or ""))
    retry_after = parse_retry_after(call.headers.get("Retry-After"))
    if status == 429 or status == 408 or (500 <= status < 600 and status not in (502, 504)):
        outcome = Outcome.TRANSIENT
    elif status in (502, 504):
        outcome = Outcome.UNCERTAIN  # a gateway answered after forwarding: Twilio may have it
    elif 200 <= status < 300:
        outcome = Outcome.UNCERTAIN
    else:
        outcome = Outcome.REJECTED
    return SubmitResult(
        outcome=outcome,
        error_code=error_code,
        error_message=message,
        http_status=status or None,
        retry_after=retry_after,
        latency_ms=latency_ms,
        response={
            "http_status": status or None,
            "error_code": error_code,
            "error_message": message,
            **({"retry_after": retry_after} if retry_after is not None else {}),
        },
    )


def _from_exception(exc: Exception, call: _Call, latency_ms: float) -> SubmitResult:
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
    )
