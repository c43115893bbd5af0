"""HTTP plumbing for the Twilio adapter: the SDK's clients pointed at a base URL, and sockets that cannot
deliver a request after it was given up on.

Why the socket options: a submission that timed out is "uncertain" and later reconciled by asking Twilio
whether it has it. That question only has a stable answer if nothing of the request can still reach
Twilio after we stopped waiting. A normal close() leaves the unacknowledged bytes of the POST in the
kernel's send queue, which keeps retransmitting them for up to ~15 minutes (tcp_retries2): across a
network partition, the POST arrived after the link came back, after the reconciler had looked, found
nothing and resent (measured: 36 of 50 uncertain submissions sent twice; docs/architecture.md,
"Uncertain submissions"). So every provider socket is
created with:

* ``SO_LINGER`` on with a 0 s timeout: close() discards the send queue and sends RST instead of FIN, so
  a request we abandon (timeout, task killed, worker killed by SIGKILL: the kernel closes its sockets)
  stops at once;
* ``TCP_USER_TIMEOUT`` = the request timeout: while the socket is still open, data unacknowledged for
  that long makes the kernel drop the connection, which bounds retransmission even if close() is never
  reached (a hung process).

Together: no byte of an attempt can leave this host later than ``started_at + timeout``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import json
import socket
import struct
import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

import aiohttp
from twilio.http.async_http_client import AsyncTwilioHttpClient
from twilio.http.http_client import TwilioHttpClient
from twilio.http.response import Response as TwilioResponse

TWILIO_API_ORIGIN = "https://api.twilio.com"
KEEPALIVE_SECONDS = 15.0  # below Twilio's / the sandbox's idle timeout, so a pooled socket is rarely stale
_LINGER_ABORT = struct.pack("ii", 1, 0)  # l_onoff=1, l_linger=0: close() resets and drops unsent data


def rewrite_url(url: str, base_url: str) -> str:
    """``https://api.twilio.com/...`` -> ``{base_url}/...``; anything else is left alone."""
    if base_url and base_url != TWILIO_API_ORIGIN and url.startswith(TWILIO_API_ORIGIN):
        rest = url[len(TWILIO_API_ORIGIN) :]
        if not rest or rest[0] in "/?":
            return base_url + rest
    return url


def abortable_socket_factory(timeout_seconds: float) -> Callable[[tuple], socket.socket]:
    """A socket factory for aiohttp's connector: every provider socket resets on close and gives up
    retransmitting after ``timeout_seconds`` (see the module docstring)."""
    user_timeout_ms = max(1, int(timeout_seconds * 1000))

    def factory(addr_info: tuple) -> socket.socket:
        family, type_, proto, _, _ = addr_info
        sock = socket.socket(family=family, type=type_, proto=proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ABORT)
        tcp_user_timeout = getattr(socket, "TCP_USER_TIMEOUT", None)  # Linux only
        if tcp_user_timeout is not None and family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, tcp_user_timeout, user_timeout_ms)
        return sock

    return factory


class Call:
    """What the HTTP layer saw for one submission (the SDK's exceptions carry no headers)."""

    __slots__ = ("headers", "sent", "status", "text")

    def __init__(self) -> None:
        self.sent = False  # request headers were handed to the transport
        self.status: int | None = None
        self.headers: Mapping[str, str] = {}
        self.text = ""


current_call: contextvars.ContextVar[Call | None] = contextvars.ContextVar("smsgw_twilio_call", default=None)


class _MarkingRequest(aiohttp.ClientRequest):
    """Marks the submission's Call as written the moment aiohttp starts writing it on an open connection
    (a little before the bytes leave: erring towards "written" only ever makes an outcome uncertain,
    which is reconciled, never resent blindly). Before this, aiohttp's request tracing did it; a trace
    config makes aiohttp build a dozen signal objects per request, about a tenth of a send worker's CPU."""

    async def send(self, conn: Any) -> aiohttp.ClientResponse:
        call = current_call.get()
        if call is not None:
            call.sent = True
        return await super().send(conn)


def _form_body(data: Mapping[str, Any] | None) -> str:
    pairs: list[tuple[str, str]] = []
    for key, value in (data or {}).items():
        for item in value if isinstance(value, list | tuple) else (value,):
            pairs.append((key, item if isinstance(item, str) else str(item)))
    return urlencode(pairs)


class BaseUrlAsyncHttpClient(AsyncTwilioHttpClient):
    """The SDK's aiohttp client, reaching ``base_url`` instead of api.twilio.com, with one pooled session
    created lazily on the loop that uses it, a real timeout, abortable sockets, and no request logging
    (numbers are PII)."""

    def __init__(self, *, base_url: str, timeout: float, max_connections: int) -> None:
        super().__init__(pool_connections=False, timeout=timeout)
        self.base_url = base_url.rstrip("/")
        self.max_connections = max_connections
        self.session: aiohttp.ClientSession | None = None
        self._auth_cache: tuple[tuple[str, str] | None, str] = (None, "")
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    def _connector_options(self) -> dict[str, Any]:
        """The connection pool's settings (``bench sdk`` varies them)."""
        return {
            "limit": self.max_connections,
            "keepalive_timeout": KEEPALIVE_SECONDS,
            "ttl_dns_cache": 300,
            "socket_factory": abortable_socket_factory(self.timeout),
        }

    def _session(self) -> aiohttp.ClientSession:
        if self.session is None or self.session.closed:
            connector = aiohttp.TCPConnector(**self._connector_options())
            # Twilio's API sets no cookies we need: a dummy jar skips cookie filtering on every request
            # and response; answers are small JSON, never compressed by the sandbox or worth asking for.
            self.session = aiohttp.ClientSession(
                connector=connector,
                request_class=_MarkingRequest,
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
            )
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
        call = current_call.get()
        async with self._session().request(
            method.upper(),
            rewrite_url(url, self.base_url),
            params={k: str(v) for k, v in params.items()} if params else None,
            data=body,
            headers=headers,
            timeout=self._timeout(seconds),
            allow_redirects=allow_redirects,
        ) as response:
            raw = await response.read()
        text = raw.decode("utf-8", "replace")
        if call is not None:
            call.status = response.status
            call.headers = response.headers
            call.text = text
        return TwilioResponse(response.status, text, response.headers)

    def _timeout(self, seconds: float) -> aiohttp.ClientTimeout:
        cached = self._timeouts.get(seconds)
        if cached is None:
            cached = self._timeouts[seconds] = aiohttp.ClientTimeout(total=seconds, sock_connect=seconds)
        return cached

    def _basic_auth(self, auth: tuple[str, str]) -> str:
        if self._auth_cache[0] != auth:
            encoded = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
            self._auth_cache = (auth, f"Basic {encoded}")
        return self._auth_cache[1]

    async def close(self) -> None:
        if self.session is not None and not self.session.closed:
            await self.session.close()


class BaseUrlHttpClient(TwilioHttpClient):
    """The SDK's requests client (look-ups only: GETs, which cannot duplicate a message), reaching
    ``base_url`` instead of api.twilio.com, without logging."""

    def __init__(self, *, base_url: str, timeout: float) -> None:
        super().__init__(timeout=timeout)
        self.base_url = base_url.rstrip("/")

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> TwilioResponse:
        return super().request(method, rewrite_url(url, self.base_url), *args, **kwargs)

    def log_request(self, kwargs: dict[str, Any]) -> None:
        return None

    def log_response(self, status_code: int, response: Any) -> None:
        return None


def new_loop() -> asyncio.AbstractEventLoop:
    # uvloop roughly halves the event loop's and aiohttp's per-request CPU, which is most of a send
    # worker's CPU at thousands of submissions per second; the stdlib loop is the portable fallback.
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency on Linux/macOS
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def start_loop_thread() -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    loop = new_loop()
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
