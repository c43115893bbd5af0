"""Status callbacks from the sandbox to the message's ``StatusCallback`` URL, signed like Twilio's.

For every stored message with a ``StatusCallback`` (while ``callbacks_enabled``), the sandbox decides a
final status by the configured shares and then POSTs, in order, ``sent`` and the final status
(``delivered``, ``undelivered`` with ErrorCode 30003 or ``failed`` with ErrorCode 30008) as Twilio's
form, with ``X-Twilio-Signature``. Each callback also moves the stored message's status, so a GET or a
list shows what the callbacks said (never backwards: a shuffled ``sent`` after ``delivered`` leaves it
``delivered``). A dropped callback still moves the status: the provider knows, the receiver does not.

Knobs (``SandboxConfig``): ``callback_delay_ms`` before a message's first callback, ``callback_gap_ms``
between its callbacks, ``callback_repeat`` copies of each, ``callback_shuffle``, ``callback_drop_rate``
(per copy), ``callback_early_rate`` (the first callback is POSTed and awaited before the create answer
is written), ``callback_timeout_ms``, ``callback_retries`` and ``callback_retry_backoff_ms``.

Cost and bounds: a message's callbacks are one small ``_Chain``; due chains wait in one queue served by
``CONNECTIONS`` worker coroutines over one pooled ClientSession, so a burst of accepted messages never
turns into a burst of tasks or sockets. A chain moves to its next callback only once the previous one
was answered, given up or dropped, so the receiver sees a message's callbacks in order unless shuffled.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import os
import time
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import aiohttp
from yarl import URL

if TYPE_CHECKING:
    from delivery.sandbox.server import SandboxMessage, SandboxState

logger = logging.getLogger("delivery.sandbox.callbacks")

API_VERSION = "2010-04-01"
CONNECTIONS = 64  # callback POSTs in flight at once (and sockets); the rest wait in the queue
USER_AGENT = "TwilioProxy/1.1"
FORM = "application/x-www-form-urlencoded"
# Twilio's codes for the two unhappy finals: 30003 unreachable handset, 30008 unknown error
FINAL_ERRORS = {
    "undelivered": (30003, "Unreachable destination handset"),
    "failed": (30008, "Unknown error"),
}
_RANK = {"accepted": 0, "queued": 0, "sending": 0, "sent": 1, "delivered": 2, "undelivered": 2, "failed": 2}
_OK, _RETRY, _GIVE_UP = 0, 1, 2


def twilio_signature(auth_token: str, url: str, params: dict[str, str]) -> str:
    """``X-Twilio-Signature``: base64(HMAC-SHA1(auth token, url + key1 + value1 + key2 + ...)), keys
    sorted, over the exact URL that is requested (query string included)."""
    payload = url + "".join(key + params[key] for key in sorted(params))
    digest = hmac.new(auth_token.encode(), payload.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def callback_params(account_sid: str, message: SandboxMessage, status: str) -> dict[str, str]:
    """The form Twilio posts for an outbound SMS status change."""
    params = {
        "AccountSid": account_sid,
        "ApiVersion": API_VERSION,
        "From": message.from_,
        "MessageSid": message.sid,
        "MessageStatus": status,
        "SmsSid": message.sid,
        "SmsStatus": status,
        "To": message.to,
    }
    if message.messaging_service_sid:
        params["MessagingServiceSid"] = message.messaging_service_sid
    error = FINAL_ERRORS.get(status)
    if error is not None:
        params["ErrorCode"] = str(error[0])
    return params


class _Chain:
    """One message's callbacks still to send: ``steps[index]`` is next, ``attempt`` its retry number."""

    __slots__ = ("attempt", "generation", "index", "message", "replay", "steps", "token")

    def __init__(self, message: SandboxMessage, steps: list[str], generation: int, replay: bool) -> None:
        self.message = message
        self.steps = steps
        self.generation = generation
        self.replay = replay
        self.index = 0
        self.attempt = 0
        self.token = ""


class StatusCallbackHook:
    """Decides, schedules, signs and POSTs the status callbacks; counts them for ``/_sandbox/stats``."""

    def __init__(self, state: SandboxState) -> None:
        self.state = state
        self.generation = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self._queue: asyncio.Queue[_Chain] | None = None
        self._workers: list[asyncio.Task] = []
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}
        self._early: dict[str, _Chain] = {}
        self.sent = self.failed = self.dropped = self.pending = self.attempts = self.retries = 0

    # -- server hooks -------------------------------------------------------------------------------
    def message_accepted(self, message: SandboxMessage) -> None:
        """Called right after ``message`` was stored (before the HTTP answer is written). Decides the
        final status and schedules the callbacks; never blocks."""
        st = self.state
        cfg = st.config
        if not cfg.callbacks_enabled or not self._start():
            return
        rng = st.rng
        x = rng.random()
        final = "delivered"
        if x >= cfg.callback_delivered_share:
            x -= cfg.callback_delivered_share
            if x < cfg.callback_undelivered_share:
                final = "undelivered"
            elif x - cfg.callback_undelivered_share < cfg.callback_failed_share:
                final = "failed"
        message.final_status = final  # kept for replay
        repeat = cfg.callback_repeat
        steps = ["sent", final] if repeat == 1 else ["sent"] * repeat + [final] * repeat
        if cfg.callback_shuffle:
            rng.shuffle(steps)
        chain = _Chain(message, steps, self.generation, replay=False)
        self.pending += len(steps)
        if cfg.callback_early_rate and rng.random() < cfg.callback_early_rate:
            self._early[message.sid] = chain  # sent by before_response, from the create handler
        else:
            self._schedule(chain, cfg.callback_delay_ms / 1000.0)

    async def before_response(self, message: SandboxMessage) -> None:
        """Awaited by the create handler after rendering and before answering: for an "early" message,
        POST its first callback now (one attempt; a retry and the rest follow in the background)."""
        chain = self._early.pop(message.sid, None)
        if chain is not None:
            # shielded: a cancelled handler must not leave the chain half-sent and "pending" forever
            await asyncio.shield(self._step(chain))

    def replay(self, sid: str | None = None, everything: bool = False) -> dict | None:
        """Re-send the whole sequence (``sent``, then the final) of one message, or of every message that
        had callbacks: once each, in order, never dropped, no delay, same signatures. None if ``sid``
        is unknown or had no callbacks."""
        st = self.state
        if everything:
            messages = [m for m in st.all if m.final_status]
        else:
            message = st.messages.get(sid or "")
            if message is None or not message.final_status:
                return None
            messages = [message]
        if messages and not self._start():
            return None
        for message in messages:
            self.pending += 2
            self._enqueue(_Chain(message, ["sent", message.final_status], self.generation, replay=True))
        return {"messages": len(messages), "callbacks": 2 * len(messages)}

    def stats(self) -> dict:
        return {
            "sent": self.sent,
            "failed": self.failed,
            "dropped": self.dropped,
            "pending": self.pending,
            "attempts": self.attempts,
            "retries": self.retries,
        }

    def reset(self) -> None:
        """Called by ``POST /_sandbox/reset``: forget everything scheduled. Timers and POSTs already
        under way belong to an older generation and are ignored when they come back."""
        self.generation += 1
        self._early = {}
        self.sent = self.failed = self.dropped = self.pending = self.attempts = self.retries = 0
        if self._queue is not None:
            while not self._queue.empty():
                self._queue.get_nowait()

    async def close(self, app: object = None) -> None:
        """Stop the workers and close the session (the app's ``on_cleanup``)."""
        for worker in self._workers:
            worker.cancel()
        if self._workers:
            await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        if self._session is not None:
            await self._session.close()
            self._session = None
        self._queue = None
        self._loop = None

    # -- machinery ----------------------------------------------------------------------------------
    def _start(self) -> bool:
        """Create the session, queue and workers on the running loop, once. False without a loop (the
        store used directly, as in unit tests): nothing can be sent then."""
        if self._session is not None:
            return True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        self._loop = loop
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=CONNECTIONS, limit_per_host=0),
            skip_auto_headers=("User-Agent",),
            auto_decompress=False,
        )
        self._queue = asyncio.Queue()
        self._workers = [loop.create_task(self._work()) for _ in range(CONNECTIONS)]
        return True

    def _schedule(self, chain: _Chain, delay: float) -> None:
        if delay > 0:
            self._loop.call_later(delay, self._enqueue, chain)
        else:
            self._enqueue(chain)

    def _enqueue(self, chain: _Chain) -> None:
        if chain.generation == self.generation and self._queue is not None:
            self._queue.put_nowait(chain)

    async def _work(self) -> None:
        queue = self._queue
        while True:
            chain = await queue.get()
            if chain.generation != self.generation:
                continue
            try:
                await self._step(chain)
            except Exception:  # a bug here must not kill a worker and stall every later callback
                logger.exception("sandbox callback step failed")

    async def _step(self, chain: _Chain) -> None:
        """Send (or drop) the chain's current callback once, then advance it or schedule a retry."""
        if chain.generation != self.generation:
            return
        message = chain.message
        status = chain.steps[chain.index]
        cfg = self.state.config
        if chain.attempt == 0:
            self._apply(message, status)
            drop = cfg.callback_drop_rate
            if drop and not chain.replay and self.state.rng.random() < drop:
                self.dropped += 1
                self.pending -= 1
                self._advance(chain)
                return
            # like Twilio's I-Twilio-Idempotency-Token: kept across retries, new for every copy
            chain.token = os.urandom(16).hex()
        result = await self._post(message, status, chain.token, cfg.callback_timeout_ms)
        if chain.generation != self.generation:
            return
        self.attempts += 1
        if result == _RETRY and chain.attempt < cfg.callback_retries:
            chain.attempt += 1
            self.retries += 1
            backoff = cfg.callback_retry_backoff_ms / 1000.0 * 2 ** (chain.attempt - 1)
            self._schedule(chain, backoff)
            return
        if result == _OK:
            self.sent += 1
        else:
            self.failed += 1
        self.pending -= 1
        self._advance(chain)

    def _advance(self, chain: _Chain) -> None:
        index = chain.index + 1
        if index >= len(chain.steps):
            return
        chain.index = index
        chain.attempt = 0
        same = chain.steps[index] == chain.steps[index - 1]  # copies of one callback follow at once
        self._schedule(chain, 0.0 if chain.replay or same else self.state.config.callback_gap_ms / 1000.0)

    def _apply(self, message: SandboxMessage, status: str) -> None:
        if _RANK[status] <= _RANK.get(message.status, 0):
            return
        message.status = status
        message.updated_ts = max(int(time.time()), message.created_ts)
        error = FINAL_ERRORS.get(status)
        if error is not None:
            message.error_code, message.error_message = error

    async def _post(self, message: SandboxMessage, status: str, token: str, timeout_ms: float) -> int:
        st = self.state
        url = message.status_callback
        params = callback_params(st.account_sid, message, status)
        headers = {
            "Content-Type": FORM,
            "User-Agent": USER_AGENT,
            "X-Twilio-Signature": twilio_signature(st.auth_token, url, params),
            "I-Twilio-Idempotency-Token": token,
        }
        timeout = self._timeouts.get(timeout_ms)
        if timeout is None:
            timeout = self._timeouts[timeout_ms] = aiohttp.ClientTimeout(total=timeout_ms / 1000.0)
        try:
            # encoded=True: request the URL byte for byte as signed (no re-quoting of the query)
            async with self._session.post(
                URL(url, encoded=True),
                data=urlencode(params).encode(),
                headers=headers,
                timeout=timeout,
                allow_redirects=False,
            ) as response:
                await response.read()
                code = response.status
        except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError):
            logger.warning("sandbox callback: invalid StatusCallback URL for %s", message.sid)
            return _GIVE_UP  # retrying cannot help
        except (aiohttp.ClientError, TimeoutError, OSError):
            return _RETRY  # refused, reset, timed out: Twilio retries these
        if 200 <= code < 300:
            return _OK
        return _RETRY if code >= 500 or code == 429 else _GIVE_UP
