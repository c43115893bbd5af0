"""Callbacks from a sandbox to the URL a stored message named (status callbacks, delivery receipts): the
scheduling, retries and counters every provider's emulator shares (``StatusCallbackHook``). A provider's
hook subclasses it, in its emulator (``delivery.providers.<name>.sandbox``), and builds the request each
callback is (``build_request``: method, URL, headers, body).

The hook reads its state's ``config`` (the ``callback_*`` keys below and ``callbacks_enabled``), ``clock``,
``rng``, ``retry_policy`` (``retry_policy_set`` of the config's), ``messages`` / ``all`` (replays); a
stored item gives ``sid``, ``has_callbacks`` and ``timeline()``: (status, wall-clock instant) of each
status change.

Timing: each callback is due ``callback_delay_ms`` after its status change. Knobs: ``callback_repeat``
copies of each, ``callback_shuffle`` (the statuses in random order over the same instants),
``callback_drop_rate`` (per copy), ``callback_early_rate`` (the first callback is POSTed and awaited
before the create answer is written; the rest go at their status changes, without the delay).

Retries like Twilio's webhook connection overrides (twilio.com/docs/usage/webhooks/
webhooks-connection-overrides), the model every sandbox follows: ``callback_retries`` (``rc``, default 1)
more attempts, only for the failure kinds in ``callback_retry_policy`` (``rp``, default ``ct``: the TCP
connection could not be made; ``rt`` no response within ``callback_timeout_ms``; ``4xx``; ``5xx``;
``all``), all attempts of one callback within ``callback_total_timeout_ms`` (``tt``, default 15000). So
by default an HTTP answer, whatever its status, or a read timeout is final. Retries wait
``callback_retry_backoff_ms``, doubled each time.

Cost and bounds: only messages with a callback URL get a ``_Chain``; due chains wait in one queue served
by ``CONNECTIONS`` worker coroutines over one pooled ClientSession, so a burst of accepted messages never
turns into a burst of tasks or sockets. A chain moves to its next callback only once the previous one
was answered, given up or dropped, so the receiver sees a message's callbacks in order unless shuffled.
Must not import Django.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import aiohttp
from yarl import URL

logger = logging.getLogger("sandbox.callbacks")

CONNECTIONS = 64  # callback POSTs in flight at once (and sockets); the rest wait in the queue
# After a restart from the journal: status changes this recent may not have been called back yet, so
# they are sent again (retries included, a callback chain ends within a few minutes of its status).
RESTORED_CALLBACK_WINDOW = 600.0
FORM = "application/x-www-form-urlencoded"
# what an attempt ended with: answered 2xx, or the kind of failure (as Twilio's rp names them)
OK, CONNECT, READ, HTTP_4XX, HTTP_5XX, FINAL = "ok", "ct", "rt", "4xx", "5xx", "final"
# Twilio's webhook connection override ``rp`` (twilio.com/docs/usage/webhooks/webhooks-connection-overrides)
RETRY_POLICIES = (CONNECT, READ, HTTP_4XX, HTTP_5XX)


def parse_retry_policy(value: object) -> str:
    """Twilio's ``rp``: ``ct``, ``rt``, ``4xx``, ``5xx`` or ``all``, or a comma list of them."""
    if not isinstance(value, str):
        raise ValueError("callback_retry_policy must be a string")
    items = [item.strip().lower() for item in value.split(",") if item.strip()]
    if not items or any(item not in (*RETRY_POLICIES, "all") for item in items):
        raise ValueError("callback_retry_policy must be ct, rt, 4xx, 5xx or all, or a comma list of them")
    return ",".join(dict.fromkeys(items))


def retry_policy_set(policy: str) -> frozenset[str]:
    items = set(policy.split(","))
    return frozenset(RETRY_POLICIES) if "all" in items else frozenset(items)


class _Chain:
    """One message's callbacks still to send: ``steps[index]`` (status, due wall-clock time) is next,
    ``attempt`` its retry number, ``deadline`` (loop time) the end of its ``tt``."""

    __slots__ = ("attempt", "deadline", "generation", "index", "message", "replay", "steps", "token")

    def __init__(self, message: Any, steps: list[tuple[str, float]], generation: int, replay: bool) -> None:
        self.message = message
        self.steps = steps
        self.generation = generation
        self.replay = replay
        self.index = 0
        self.attempt = 0
        self.deadline = 0.0
        self.token = ""


class StatusCallbackHook:
    """Schedules, signs and POSTs the status callbacks; counts them for ``/_sandbox/stats``."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.generation = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self._queue: asyncio.Queue[_Chain] | None = None
        self._workers: list[asyncio.Task] = []
        self._early: dict[str, _Chain] = {}
        self.sent = self.failed = self.dropped = self.pending = self.attempts = self.retries = 0
        self.results: dict[str, int] = {}

    # -- server hooks -------------------------------------------------------------------------------
    def message_accepted(self, message: Any) -> None:
        """Called right after ``message`` was stored (before the HTTP answer is written): plans its
        callbacks from its timeline; never blocks."""
        st = self.state
        cfg = st.config
        if not cfg.callbacks_enabled or not self._start():
            return
        message.has_callbacks = True  # kept for replay
        rng = st.rng
        events = message.timeline()
        repeat = cfg.callback_repeat
        statuses = [status for status, _ in events for _ in range(repeat)]
        instants = [at for _, at in events for _ in range(repeat)]
        if cfg.callback_shuffle:
            rng.shuffle(statuses)  # the same instants, the statuses in another order
        early = bool(cfg.callback_early_rate) and rng.random() < cfg.callback_early_rate
        delay = 0.0 if early else cfg.callback_delay_ms / 1000.0
        steps = [(status, at + delay) for status, at in zip(statuses, instants, strict=True)]
        chain = _Chain(message, steps, self.generation, replay=False)
        self.pending += len(statuses)
        if early:
            self._early[message.sid] = chain  # sent by before_response, from the create handler
        else:
            self._schedule(chain)

    def message_restored(self, message: Any) -> int:
        """A message read back from the journal after a restart (``sandbox.journal``): plan the
        callbacks it may still be owed. Which ones the dead process had sent is not known, so every
        status change of the last ``RESTORED_CALLBACK_WINDOW`` seconds is sent again now (a duplicate
        callback is what a provider's own retries produce too) and the later ones at their time. Returns
        the number planned."""
        st = self.state
        if not st.config.callbacks_enabled or not self._start():
            return 0
        now = st.clock()
        steps = [
            (status, max(at, now)) for status, at in message.timeline() if at > now - RESTORED_CALLBACK_WINDOW
        ]
        if not steps:
            return 0
        self.pending += len(steps)
        self._schedule(_Chain(message, steps, self.generation, replay=False))
        return len(steps)

    async def before_response(self, message: Any) -> None:
        """Awaited by the create handler after rendering and before answering: for an "early" message,
        POST its first callback now (one attempt; a retry and the rest follow in the background)."""
        chain = self._early.pop(message.sid, None)
        if chain is not None:
            # shielded: a cancelled handler must not leave the chain half-sent and "pending" forever
            await asyncio.shield(self._step(chain))

    def replay(self, sid: str | None = None, everything: bool = False) -> dict | None:
        """Re-send the callbacks of one message, or of every message that had callbacks, for the status
        changes that have happened so far: once each, in order, never dropped, no delay, same
        signatures. None if ``sid`` is unknown or had no callbacks."""
        st = self.state
        if everything:
            messages = [m for m in st.all if m.has_callbacks]
        else:
            message = st.messages.get(sid or "")
            if message is None or not message.has_callbacks:
                return None
            messages = [message]
        if messages and not self._start():
            return None
        now = st.clock()
        total = 0
        for message in messages:
            steps = [(status, now) for status, at in message.timeline() if at <= now]
            if steps:
                total += len(steps)
                self.pending += len(steps)
                self._enqueue(_Chain(message, steps, self.generation, replay=True))
        return {"messages": len(messages), "callbacks": total}

    def stats(self) -> dict:
        return {
            "sent": self.sent,
            "failed": self.failed,
            "dropped": self.dropped,
            "pending": self.pending,
            "attempts": self.attempts,
            "retries": self.retries,
        }

    def results_stats(self) -> dict[str, int]:
        """Every attempt by what it ended with: ok, ct (no connection), rt (read timeout), 4xx, 5xx."""
        return dict(self.results)

    def reset(self) -> None:
        """Called by ``POST /_sandbox/reset``: forget everything scheduled. Timers and POSTs already
        under way belong to an older generation and are ignored when they come back."""
        self.generation += 1
        self._early = {}
        self.sent = self.failed = self.dropped = self.pending = self.attempts = self.retries = 0
        self.results = {}
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

    def _schedule(self, chain: _Chain) -> None:
        """Queue the chain's current step at its due time (replays: now)."""
        delay = 0.0 if chain.replay else chain.steps[chain.index][1] - self.state.clock()
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
        status = chain.steps[chain.index][0]
        cfg = self.state.config
        loop = asyncio.get_running_loop()
        if chain.attempt == 0:
            drop = cfg.callback_drop_rate
            if drop and not chain.replay and self.state.rng.random() < drop:
                self.dropped += 1
                self.pending -= 1
                self._advance(chain)
                return
            # an idempotency token (a provider's request header): kept across retries, new for every copy
            chain.token = os.urandom(16).hex()
            total = cfg.callback_total_timeout_ms / 1000.0
            chain.deadline = loop.time() + total if total > 0 else float("inf")
        budget = min(cfg.callback_timeout_ms / 1000.0, chain.deadline - loop.time())
        if budget > 0:
            result = await self._post(message, status, chain.token, budget)
            if chain.generation != self.generation:
                return
            self.attempts += 1
            self.results[result] = self.results.get(result, 0) + 1
        else:
            result = FINAL  # the callback's total time is used up
        if result in self.state.retry_policy and chain.attempt < cfg.callback_retries:
            backoff = cfg.callback_retry_backoff_ms / 1000.0 * 2**chain.attempt
            if loop.time() + backoff < chain.deadline:
                chain.attempt += 1
                self.retries += 1
                self._loop.call_later(backoff, self._enqueue, chain)
                return
        if result == OK:
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
        self._schedule(chain)

    def build_request(self, message: Any, status: str, token: str) -> tuple[str, str, dict, bytes]:
        """(method, URL, headers, body) of one callback of ``message`` for ``status``; ``token`` is new for
        every copy and kept across its retries. A provider's hook supplies it."""
        raise NotImplementedError

    async def _post(self, message: Any, status: str, token: str, budget: float) -> str:
        """One attempt within ``budget`` seconds: ``OK`` or the kind of failure."""
        method, url, headers, body = self.build_request(message, status, token)
        # connect and each read are limited separately, so a timeout says which one it was
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=budget, sock_read=budget)
        try:
            async with asyncio.timeout(budget * 1.05 + 0.05):  # after sock_connect, to tell them apart
                # encoded=True: request the URL byte for byte as signed (no re-quoting of the query)
                async with self._session.request(
                    method,
                    URL(url, encoded=True),
                    data=body or None,
                    headers=headers,
                    timeout=timeout,
                    allow_redirects=False,
                ) as response:
                    code = response.status
                    await response.read()
        except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError):
            logger.warning("sandbox callback: invalid StatusCallback URL for %s", message.sid)
            return FINAL  # retrying cannot help
        except aiohttp.ConnectionTimeoutError:
            return CONNECT
        except (aiohttp.ServerTimeoutError, TimeoutError):
            return READ
        except aiohttp.ClientPayloadError:
            return FINAL  # Twilio "doesn't retry on partial response"
        except (aiohttp.ClientConnectionError, OSError):
            # refused, reset, or closed before any answer (a pooled keep-alive connection the receiver
            # had closed included): no HTTP answer came, as when the provider cannot connect
            return CONNECT
        except aiohttp.ClientError:
            return FINAL
        if 200 <= code < 300:
            return OK
        if 400 <= code < 500:
            return HTTP_4XX
        if code >= 500:
            return HTTP_5XX
        return FINAL
