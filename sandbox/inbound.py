"""Inbound messages from a sandbox to the gateway: a recipient "replies", and the sandbox calls the
account's incoming-message webhook as its provider would (``InboundSender``). A provider's sender
subclasses it, in its emulator (``delivery.providers.<name>.sandbox.inbound``), and supplies the
webhooks one message is (``plan``: Twilio posts one per message, Vonage one per part), the request each
attempt is (``build_request``), what counts as taken (``accepted``), when to try again
(``retry_delay``) and what to do with the answer (``answered``: Twilio executes the TwiML).

The control API (``sandbox.app``): ``POST /_sandbox/inbound`` with ``{"from", "to", "body", "url"?,
"copies"?, "burst"?, "delay_ms"?, ...}`` (``ask_from_json``) answers 202 with the ids it made;
``GET /_sandbox/inbound`` lists every webhook with its deliveries (one per copy) and their attempts
(status code, result, the answer's body).

Timing: each message's webhooks go in order, their copies one after the other; a message's first
attempts wait ``delay_ms``. A retry is scheduled on its own and never holds the next webhook back (a
provider's retry queue is not its delivery order). ``burst`` messages go side by side, at most
``CONNECTIONS`` requests in flight. Every attempt is counted; a record keeps the first ``BODY_KEPT``
characters of each answer, and shows ``result`` ``pending`` while its request is under way. Must not
import Django.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from yarl import URL

from sandbox.callbacks import CONNECT, FINAL, HTTP_4XX, HTTP_5XX, OK, READ

logger = logging.getLogger("sandbox.inbound")

CONNECTIONS = 64
PENDING = "pending"  # an attempt's result while its request is under way
BODY_KEPT = 4000  # characters of each answer kept in its attempt's record
RECORDS_KEPT = 100_000  # webhooks kept for GET /_sandbox/inbound; the oldest are forgotten past it
MAX_COPIES, MAX_BURST, MAX_DELAY_MS = 100, 10_000, 600_000
E164 = re.compile(r"\+[1-9][0-9]{6,14}")


class AskError(ValueError):
    """A bad control request: 400 naming ``field``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass
class InboundAsk:
    """One ``POST /_sandbox/inbound``, checked. ``extra``: the provider's own keys, as given."""

    from_: str
    to: str
    body: str
    url: str
    copies: int = 1
    burst: int = 1
    delay_ms: float = 0.0
    extra: dict = field(default_factory=dict)


def _count(payload: dict, key: str, default: int, high: int) -> int:
    value = payload.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise AskError(key, f"must be an integer from 1 to {high}")
    return value


def check_url(key: str, value: Any) -> str:
    if not isinstance(value, str) or (value and not value.startswith(("http://", "https://"))):
        raise AskError(key, "must be an http:// or https:// URL")
    return value


def ask_from_json(
    payload: Any, *, default_url: str, default_copies: int, extra_keys: tuple = ()
) -> InboundAsk:
    """The control request checked: ``from`` an E.164 number, ``to`` a non-empty string (the provider
    checks its form), ``body`` a string, ``url`` (default: the configured ``inbound_url``), ``copies``
    (default ``inbound_copies``), ``burst``, ``delay_ms``; ``extra_keys`` are the provider's own."""
    if not isinstance(payload, dict):
        raise AskError("body", "expected a JSON object")
    unknown = sorted(set(payload) - {"from", "to", "body", "url", "copies", "burst", "delay_ms", *extra_keys})
    if unknown:
        raise AskError(unknown[0], "unknown key")
    from_ = payload.get("from")
    if not isinstance(from_, str) or not E164.fullmatch(from_):
        raise AskError("from", "must be an E.164 number (+ and 7 to 15 digits)")
    to = payload.get("to")
    if not isinstance(to, str) or not to.strip():
        raise AskError("to", "required")
    body = payload.get("body")
    if not isinstance(body, str):
        raise AskError("body", "required: a string")
    url = check_url("url", payload.get("url", default_url))
    if not url:
        raise AskError("url", "required: no inbound_url is configured")
    delay = payload.get("delay_ms", 0)
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay <= MAX_DELAY_MS:
        raise AskError("delay_ms", f"must be a number from 0 to {MAX_DELAY_MS}")
    return InboundAsk(
        from_=from_,
        to=to.strip(),
        body=body,
        url=url,
        copies=_count(payload, "copies", default_copies, MAX_COPIES),
        burst=_count(payload, "burst", 1, MAX_BURST),
        delay_ms=float(delay),
        extra={key: payload[key] for key in extra_keys if key in payload},
    )


class Webhook:
    """One webhook request as the provider identifies it (a Twilio MessageSid, a Vonage part's
    messageId), sent ``copies`` times; ``fields`` are what the provider's request carries that does
    not change between attempts, ``info`` what the control API shows of it."""

    __slots__ = ("deliveries", "fields", "id", "info", "message_id", "replies", "url")

    def __init__(self, webhook_id: str, message_id: str, url: str, fields: dict, info: dict) -> None:
        self.id = webhook_id
        self.message_id = message_id
        self.url = url
        self.fields = fields
        self.info = info
        self.deliveries: list[list[dict]] = []  # per copy: its attempts
        self.replies: list[dict] = []  # what the answers made the provider do (Twilio: <Message> sends)

    def to_json(self) -> dict:
        attempts = [a for d in self.deliveries for a in d]
        return {
            "id": self.id,
            "message_id": self.message_id,
            "url": self.url,
            **self.info,
            "attempts": len(attempts),
            "statuses": [a["status"] for a in attempts],
            "deliveries": [{"copy": i + 1, "attempts": list(d)} for i, d in enumerate(self.deliveries)],
            "replies": list(self.replies),
        }


class InboundSender:
    """Sends the webhooks asked for, with their retries, and keeps what happened for the control API."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.generation = 0
        self._session: aiohttp.ClientSession | None = None
        self._limit: asyncio.Semaphore | None = None
        self._tasks: set[asyncio.Task] = set()
        self.reset()

    # -- what a provider supplies -------------------------------------------------------------------
    EXTRA_KEYS: tuple[str, ...] = ()

    def plan(self, ask: InboundAsk) -> list[Webhook]:
        """The webhooks of one message, in the order they are sent."""
        raise NotImplementedError

    def build_request(self, webhook: Webhook, copy: int, attempt: int) -> tuple[str, str, dict, bytes]:
        """(method, URL, headers, body) of one attempt."""
        raise NotImplementedError

    def accepted(self, code: int) -> bool:
        """Whether an HTTP answer with ``code`` delivered the webhook."""
        return 200 <= code < 300

    def retry_delay(self, attempt: int, result: str, elapsed: float) -> float | None:
        """Seconds until the next attempt after attempt number ``attempt`` (0 = the first) ended with
        ``result``, ``elapsed`` seconds after the first; None: no more attempts."""
        return None

    def answered(self, webhook: Webhook, code: int, body: str) -> None:
        """A delivered webhook's answer (Twilio executes its TwiML)."""

    def check(self, ask: InboundAsk) -> None:
        """The provider's own checks of a request (raise AskError)."""

    # -- control API ----------------------------------------------------------------------------------
    def submit(self, payload: Any) -> dict:
        """``POST /_sandbox/inbound``: check, plan ``burst`` messages, start sending; the 202 answer."""
        cfg = self.state.config
        ask = ask_from_json(
            payload,
            default_url=cfg.inbound_url,
            default_copies=cfg.inbound_copies,
            extra_keys=self.EXTRA_KEYS,
        )
        self.check(ask)
        messages = [self.plan(ask) for _ in range(ask.burst)]
        for webhooks in messages:
            for webhook in webhooks:
                self._keep(webhook)
            self.counts["messages"] += 1
            self.counts["webhooks"] += len(webhooks)
            self.counts["pending"] += len(webhooks) * ask.copies
            self._spawn(self._send_message(webhooks, ask.copies, ask.delay_ms / 1000.0, self.generation))
        return {
            "url": ask.url,
            "copies": ask.copies,
            "ids": [w.id for webhooks in messages for w in webhooks],
            "messages": [
                {"id": webhooks[0].message_id, "webhooks": [w.id for w in webhooks]} for webhooks in messages
            ],
        }

    def listing(self, webhook_id: str | None = None) -> list[dict]:
        if webhook_id is not None:
            found = [w for w in self.records.values() if webhook_id in (w.id, w.message_id)]
            return [w.to_json() for w in found]
        return [w.to_json() for w in self.records.values()]

    def stats(self) -> dict:
        return dict(self.counts)

    def reset(self) -> None:
        """Forget every webhook; sends under way belong to an older generation and stop."""
        self.generation += 1
        self.records: OrderedDict[str, Webhook] = OrderedDict()
        self.counts = dict.fromkeys(
            ("messages", "webhooks", "attempts", "retries", "delivered", "failed", "pending"), 0
        )

    async def close(self, app: object = None) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- machinery ----------------------------------------------------------------------------------
    def _keep(self, webhook: Webhook) -> None:
        self.records[webhook.id] = webhook
        while len(self.records) > RECORDS_KEPT:
            self.records.popitem(last=False)

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_message(
        self, webhooks: list[Webhook], copies: int, delay: float, generation: int
    ) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        for webhook in webhooks:
            for copy in range(copies):
                if generation != self.generation:
                    return
                webhook.deliveries.append([])
                await self._deliver(webhook, copy, generation)

    async def _deliver(self, webhook: Webhook, copy: int, generation: int) -> None:
        """The first attempt of one copy, in order; its retries go on in a task of their own."""
        started = asyncio.get_running_loop().time()
        result = await self._attempt(webhook, copy, 0)
        if generation == self.generation:
            delay = self._next(result, 0, started)
            if delay is not None:
                self._spawn(self._retry(webhook, copy, generation, started, delay))

    async def _retry(
        self, webhook: Webhook, copy: int, generation: int, started: float, delay: float
    ) -> None:
        attempt = 1
        while True:
            await asyncio.sleep(delay)
            if generation != self.generation:
                return
            result = await self._attempt(webhook, copy, attempt)
            if generation != self.generation:
                return
            next_delay = self._next(result, attempt, started)
            if next_delay is None:
                return
            delay, attempt = next_delay, attempt + 1

    def _next(self, result: str, attempt: int, started: float) -> float | None:
        """Count the attempt's outcome: the seconds until the next attempt, or None when it was the last."""
        if result != OK:
            delay = self.retry_delay(attempt, result, asyncio.get_running_loop().time() - started)
            if delay is not None:
                self.counts["retries"] += 1
                return delay
        self.counts["delivered" if result == OK else "failed"] += 1
        self.counts["pending"] -= 1
        return None

    async def _attempt(self, webhook: Webhook, copy: int, attempt: int) -> str:
        """One request; its record appended to the copy's attempts. OK or the kind of failure."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=CONNECTIONS, limit_per_host=0),
                skip_auto_headers=("User-Agent",),
            )
            self._limit = asyncio.Semaphore(CONNECTIONS)
        method, url, headers, body = self.build_request(webhook, copy, attempt)
        budget = self.state.config.callback_timeout_ms / 1000.0
        loop = asyncio.get_running_loop()
        record: dict[str, Any] = {"at": self.state.clock(), "status": None, "result": PENDING, "response": ""}
        webhook.deliveries[copy].append(record)
        self.counts["attempts"] += 1
        async with self._limit:
            began = loop.time()
            code, text, result = await _request(self._session, method, url, headers, body, budget)
        record["ms"] = round((loop.time() - began) * 1000, 1)
        record["status"], record["response"] = code, text[:BODY_KEPT]
        if code is not None:
            result = OK if self.accepted(code) else _failure(code)
        record["result"] = result
        if result == OK:
            try:
                self.answered(webhook, code, text)
            except Exception:  # a bad answer must not stop the sender
                logger.exception("sandbox inbound: handling the answer failed")
        return result


def _failure(code: int) -> str:
    """The kind of a refusing answer, as the status callbacks' retry policy names them."""
    if 400 <= code < 500:
        return HTTP_4XX
    return HTTP_5XX if code >= 500 else FINAL


async def _request(
    session: aiohttp.ClientSession, method: str, url: str, headers: dict, body: bytes, budget: float
) -> tuple[int | None, str, str]:
    """(status code or None, answer body, failure kind when there is no answer)."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=budget, sock_read=budget)
    try:
        async with asyncio.timeout(budget * 1.05 + 0.05):
            async with session.request(
                method,
                URL(url, encoded=True),  # the URL byte for byte as signed
                data=body or None,
                headers=headers,
                timeout=timeout,
                allow_redirects=False,
            ) as response:
                raw = await response.read()
                return response.status, raw.decode("utf-8", "replace"), FINAL
    except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError):
        return None, "", FINAL
    except aiohttp.ConnectionTimeoutError:
        return None, "", CONNECT
    except (aiohttp.ServerTimeoutError, TimeoutError):
        return None, "", READ
    except aiohttp.ClientPayloadError:
        return None, "", FINAL
    except (aiohttp.ClientConnectionError, OSError):
        return None, "", CONNECT
    except aiohttp.ClientError:
        return None, "", FINAL
