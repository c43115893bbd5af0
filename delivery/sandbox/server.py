"""The sandbox provider: an aiohttp.web server speaking Twilio's Messages API, plus a control API.

Twilio surface (HTTP Basic auth ``AccountSid:AuthToken``):

* ``POST /2010-04-01/Accounts/{AccountSid}/Messages.json`` (form: To, From | MessagingServiceSid, Body,
  StatusCallback, ...) -> 201 message resource, or a Twilio-shaped error.
* ``GET /2010-04-01/Accounts/{AccountSid}/Messages/{Sid}.json`` -> the resource or 404 (code 20404).
* ``GET /2010-04-01/Accounts/{AccountSid}/Messages.json`` with ``To``, ``From``, ``DateSent``,
  ``DateSent<``, ``DateSent>`` (a date ``YYYY-MM-DD`` or an ISO datetime), newest first, paged with
  ``PageSize`` (default 50, max 1000), ``Page`` and ``PageToken`` exactly as the SDK follows them.

Control surface (JSON, unauthenticated: bind it to localhost):

* ``GET/POST /_sandbox/config`` -- fault injection (see ``SandboxConfig``); POST merges the given keys.
* ``GET /_sandbox/stats`` -- ``{"submissions": stored, "by_outcome": {...}, "callbacks": {"sent",
  "failed", "dropped", "pending", ...}}``.
* ``POST /_sandbox/callbacks/replay`` -- ``{"sid": "SM..."}`` or ``{"all": true}``: send a message's
  status callbacks (``sent``, then its final status) again (see ``callbacks.py``).
* ``POST /_sandbox/reset`` -- clear store and stats, restore the start config.
* ``GET /_sandbox/health`` -- 200.

Everything lives in this process's memory; the process is the store. Must not import Django.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import copy
import hmac
import json
import logging
import math
import os
import random
import re
import signal
import time
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode

from aiohttp import web

from delivery.sandbox.callbacks import StatusCallbackHook

logger = logging.getLogger("delivery.sandbox")

API_VERSION = "2010-04-01"
DEFAULT_ACCOUNT_SID = "AC" + "0" * 32
DEFAULT_AUTH_TOKEN = "sandbox-auth-token"
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
MAX_BODY_CHARS = 1600
MORE_INFO = "https://www.twilio.com/docs/errors/"

RATE_KEYS = ("error_rate_5xx", "error_rate_429", "error_rate_400", "timeout_rate", "accept_then_hang_rate")
CALLBACK_SHARE_KEYS = ("callback_delivered_share", "callback_undelivered_share", "callback_failed_share")
_UNIT_KEYS = frozenset((*RATE_KEYS, *CALLBACK_SHARE_KEYS, "callback_drop_rate", "callback_early_rate"))
_INT_RANGES = {"error_code_400": (0, None), "callback_repeat": (1, 100), "callback_retries": (0, 10)}
_BOOL_KEYS = frozenset(("callbacks_enabled", "callback_shuffle"))
RULE_ACTIONS = ("500", "503", "429", "400", "timeout", "accept_then_hang")
OUTCOMES = (
    "accepted",
    "error_500",
    "error_503",
    "error_429",
    "error_400",
    "timeout",
    "accept_then_hang",
    "invalid_request",
    "unauthorized",
)

_E164ISH = re.compile(r"\+?[1-9][0-9]{4,14}")
_DATE_ONLY = re.compile(r"\d{4}-\d{2}-\d{2}")
_GSM7_BASIC = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?"
    "¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà"
)
_GSM7_EXT = frozenset("^{}\\[~]|€\f")
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("", "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


# --- configuration ---------------------------------------------------------------------------------
@dataclass
class SandboxConfig:
    """Fault injection. Rates are shares of submits (0..1, summing to at most 1); rules come first."""

    latency_ms: float = 0.0  # added to every submit (asyncio.sleep, non-blocking)
    error_rate_5xx: float = 0.0  # answered 500 or 503, nothing stored
    error_rate_429: float = 0.0  # answered 429 + Retry-After, nothing stored
    retry_after_seconds: float = 1.0
    error_rate_400: float = 0.0  # answered 400 with error_code_400, nothing stored
    error_code_400: int = 21211
    timeout_rate: float = 0.0  # nothing stored, hang timeout_hang_seconds, then 503
    timeout_hang_seconds: float = 30.0
    accept_then_hang_rate: float = 0.0  # stored, hang timeout_hang_seconds, then 201
    # [{"to": "+1...", "action": one of RULE_ACTIONS, "times": N | None (unlimited),
    #   "error_code": int (400 only), "retry_after_seconds": float (429 only)}], matched by exact To
    rules: list[dict] = field(default_factory=list)
    # status callbacks, for messages stored with a StatusCallback (callbacks.py)
    callbacks_enabled: bool = True
    callback_delivered_share: float = 0.0  # final status shares (sum <= 1); the rest is delivered too
    callback_undelivered_share: float = 0.0  # ErrorCode 30003
    callback_failed_share: float = 0.0  # ErrorCode 30008
    # accepted -> first callback; the default leaves a fetch right after the create "queued", as Twilio
    callback_delay_ms: float = 500.0
    callback_gap_ms: float = 100.0  # between a message's callbacks (sent -> final)
    callback_repeat: int = 1  # copies of each callback
    callback_shuffle: bool = False  # a message's callbacks in random order
    callback_drop_rate: float = 0.0  # share of callbacks (copies) never sent
    callback_early_rate: float = 0.0  # share of messages whose first callback precedes the create answer
    callback_timeout_ms: float = 5000.0  # per POST
    callback_retries: int = 3  # after a refused/timed-out/5xx/429 POST
    callback_retry_backoff_ms: float = 100.0  # doubled on each retry

    def to_json(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["rules"] = copy.deepcopy(self.rules)
        return data

    def updated(self, changes: dict) -> SandboxConfig:
        """A validated copy with ``changes`` applied; raises ValueError on a bad key or value."""
        if not isinstance(changes, dict):
            raise ValueError("config must be a JSON object")
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(f"unknown config keys: {', '.join(unknown)}")
        values = {**self.to_json(), **changes}
        for key, value in values.items():
            if key == "rules":
                values[key] = _validate_rules(value)
            elif key in _INT_RANGES:
                values[key] = _as_int(key, value, *_INT_RANGES[key])
            elif key in _BOOL_KEYS:
                values[key] = as_bool(key, value)
            else:
                values[key] = _as_float(key, value, 0.0, 1.0 if key in _UNIT_KEYS else math.inf)
        for group, what in ((RATE_KEYS, "rates"), (CALLBACK_SHARE_KEYS, "callback shares")):
            if sum(values[k] for k in group) > 1.0 + 1e-9:
                raise ValueError(f"the {what} ({', '.join(group)}) must sum to at most 1")
        return SandboxConfig(**values)

    @property
    def any_rate(self) -> bool:
        return any(getattr(self, k) for k in RATE_KEYS)


def _as_float(key: str, value: Any, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{key} must be a number")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{key} must be a number") from None
    if not (lo <= number <= hi):
        raise ValueError(f"{key} must be between {lo} and {hi}")
    return number


def _as_int(key: str, value: Any, lo: int = 0, hi: int | None = None) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{key} must be an integer")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be an integer") from None
    if number < 0 or number != float(value):
        raise ValueError(f"{key} must be a non-negative integer")
    if number < lo or (hi is not None and number > hi):
        raise ValueError(f"{key} must be between {lo} and {hi}")
    return number


def as_bool(key: str, value: Any) -> bool:
    """A JSON bool, or (flags, env) true/false, 1/0, yes/no, on/off."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{key} must be true or false")


def _validate_rules(rules: Any) -> list[dict]:
    if not isinstance(rules, list):
        raise ValueError("rules must be a list")
    out = []
    for rule in rules:
        if not isinstance(rule, dict):
            raise ValueError("each rule must be an object")
        extra = set(rule) - {"to", "action", "times", "error_code", "retry_after_seconds"}
        if extra:
            raise ValueError(f"unknown rule keys: {', '.join(sorted(extra))}")
        to = rule.get("to")
        if not isinstance(to, str) or not to:
            raise ValueError("rule.to must be a non-empty string")
        action = str(rule.get("action", ""))
        if action not in RULE_ACTIONS:
            raise ValueError(f"rule.action must be one of {', '.join(RULE_ACTIONS)}")
        times = rule.get("times")
        clean: dict[str, Any] = {
            "to": to,
            "action": action,
            "times": None if times is None else _as_int("rule.times", times),
        }
        if "error_code" in rule:
            clean["error_code"] = _as_int("rule.error_code", rule["error_code"])
        if "retry_after_seconds" in rule:
            clean["retry_after_seconds"] = _as_float(
                "rule.retry_after_seconds", rule["retry_after_seconds"], 0.0, math.inf
            )
        out.append(clean)
    return out


# --- store -----------------------------------------------------------------------------------------
class SandboxMessage:
    __slots__ = (
        "body",
        "created_ts",
        "error_code",
        "error_message",
        "final_status",
        "from_",
        "messaging_service_sid",
        "num_segments",
        "seq",
        "sid",
        "status",
        "status_callback",
        "to",
        "updated_ts",
    )

    def __init__(
        self,
        seq: int,
        sid: str,
        to: str,
        from_: str,
        body: str,
        messaging_service_sid: str,
        status: str,
        ts: int,
        status_callback: str,
    ) -> None:
        self.seq = seq
        self.sid = sid
        self.to = to
        self.from_ = from_
        self.body = body
        self.messaging_service_sid = messaging_service_sid
        self.status = status
        self.created_ts = ts  # whole seconds (RFC 2822 precision); never decreases with seq
        self.updated_ts = ts
        self.status_callback = status_callback
        self.num_segments = count_segments(body)
        self.error_code: int | None = None
        self.error_message: str | None = None
        self.final_status: str | None = None  # decided by the callbacks, when it has a StatusCallback


def _seq(m: SandboxMessage) -> int:
    return m.seq


def _ts(m: SandboxMessage) -> int:
    return m.created_ts


def count_segments(body: str) -> int:
    """SMS segments as Twilio counts them: GSM-7 (160/153, extension chars count 2) or UCS-2 (70/67)."""
    if all(c in _GSM7_BASIC or c in _GSM7_EXT for c in body):
        septets = len(body) + sum(1 for c in body if c in _GSM7_EXT)
        return 1 if septets <= 160 else math.ceil(septets / 153)
    units = len(body.encode("utf-16-le")) // 2
    return 1 if units <= 70 else math.ceil(units / 67)


def rfc2822(ts: int) -> str:
    """``Thu, 30 Jul 2015 20:12:31 +0000`` (locale-independent), like Twilio's date fields."""
    t = time.gmtime(ts)
    return (
        f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon]} {t.tm_year} "
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} +0000"
    )


class BadRequest(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _parse_date_bound(key: str, raw: str) -> tuple[int, int]:
    """(first second, last second) covered by a DateSent value: a whole UTC day for ``YYYY-MM-DD``,
    one second for a datetime (naive means UTC)."""
    value = raw.strip().lstrip("=").strip()
    try:
        if _DATE_ONLY.fullmatch(value):
            start = int(datetime.fromisoformat(value).replace(tzinfo=UTC).timestamp())
            return start, start + 86399
        # a "+00:00" offset arrives as " 00:00" when the client did not percent-encode the "+"
        if len(value) > 19 and value[-6] == " ":
            value = value[:-6] + "+" + value[-5:]
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise BadRequest(20001, f"Invalid {key}: {raw!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    second = math.floor(parsed.timestamp())
    return second, second


class SandboxState:
    def __init__(
        self,
        *,
        account_sid: str = DEFAULT_ACCOUNT_SID,
        auth_token: str = DEFAULT_AUTH_TOKEN,
        config: SandboxConfig | None = None,
        seed: int | None = None,
    ) -> None:
        self.account_sid = account_sid
        self.auth_token = auth_token
        credentials = base64.b64encode(f"{account_sid}:{auth_token}".encode()).decode()
        self._expected_auth = f"Basic {credentials}"
        self.messages_path = f"/{API_VERSION}/Accounts/{account_sid}/Messages"
        self.start_config = (config or SandboxConfig()).updated({})  # validated copy
        self.seed = seed
        self.callbacks = StatusCallbackHook(self)
        self.reset()

    # -- lifecycle ----------------------------------------------------------------------------------
    def reset(self) -> None:
        self.messages: dict[str, SandboxMessage] = {}
        self.all: list[SandboxMessage] = []
        self.by_to: dict[str, list[SandboxMessage]] = {}
        self.by_from: dict[str, list[SandboxMessage]] = {}
        self._next_seq = 0
        self._last_ts = 0
        self._date_cache: tuple[int, str] = (-1, "")
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        # submits being handled right now (hangs included); survives a reset, since they still finish
        self.in_flight: int = getattr(self, "in_flight", 0)
        self.max_in_flight = self.in_flight
        self.peers: set = set()  # distinct client (host, port)s that submitted: TCP connections used
        self.rng = random.Random(self.seed)
        self.set_config(self.start_config.updated({}))
        self.callbacks.reset()

    def set_config(self, config: SandboxConfig) -> None:
        self.config = config
        rules_by_to: dict[str, list[dict]] = {}
        for rule in config.rules:
            rules_by_to.setdefault(rule["to"], []).append(rule)
        self.rules_by_to = rules_by_to
        self.any_rate = config.any_rate

    def stats(self) -> dict:
        return {
            "submissions": len(self.all),
            "by_outcome": dict(self.outcomes),
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "connections": len(self.peers),
            "callbacks": self.callbacks.stats(),
        }

    # -- auth ---------------------------------------------------------------------------------------
    def authorized(self, request: web.Request, account_sid: str) -> bool:
        header = request.headers.get("Authorization", "")
        if header != self._expected_auth:
            scheme, _, encoded = header.partition(" ")
            if scheme.lower() != "basic":
                return False
            try:
                user, _, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return False
            if not (
                hmac.compare_digest(user.encode(), self.account_sid.encode())
                and hmac.compare_digest(password.encode(), self.auth_token.encode())
            ):
                return False
        return account_sid == self.account_sid

    # -- faults -------------------------------------------------------------------------------------
    def pick_fault(self, to: str) -> tuple[str, dict | None] | None:
        """The injected outcome for a submit to ``to``: (action, rule) or None to accept normally."""
        rules = self.rules_by_to.get(to)
        if rules:
            for rule in rules:
                times = rule["times"]
                if times is None or times > 0:
                    if times is not None:
                        rule["times"] = times - 1
                    return rule["action"], rule
        if not self.any_rate:
            return None
        cfg = self.config
        x = self.rng.random()
        for key, action in (
            ("error_rate_5xx", "5xx"),
            ("error_rate_429", "429"),
            ("error_rate_400", "400"),
            ("timeout_rate", "timeout"),
            ("accept_then_hang_rate", "accept_then_hang"),
        ):
            rate = getattr(cfg, key)
            if x < rate:
                if action == "5xx":
                    action = "500" if self.rng.random() < 0.5 else "503"
                return action, None
            x -= rate
        return None

    # -- store --------------------------------------------------------------------------------------
    def store(self, to: str, from_: str, body: str, messaging_service_sid: str, status_callback: str):
        now = int(time.time())
        if now < self._last_ts:  # wall clock stepped back: keep created_ts ordered with seq
            now = self._last_ts
        self._last_ts = now
        seq = self._next_seq
        self._next_seq = seq + 1
        message = SandboxMessage(
            seq,
            "SM" + os.urandom(16).hex(),
            to,
            from_,
            body,
            messaging_service_sid,
            "queued" if from_ else "accepted",
            now,
            status_callback,
        )
        self.messages[message.sid] = message
        self.all.append(message)
        bucket = self.by_to.get(to)
        if bucket is None:
            self.by_to[to] = [message]
        else:
            bucket.append(message)
        if from_:
            bucket = self.by_from.get(from_)
            if bucket is None:
                self.by_from[from_] = [message]
            else:
                bucket.append(message)
        if status_callback:
            self.callbacks.message_accepted(message)
        return message

    def _date(self, ts: int) -> str:
        cached_ts, text = self._date_cache
        if cached_ts == ts:
            return text
        text = rfc2822(ts)
        self._date_cache = (ts, text)
        return text

    def render(self, m: SandboxMessage) -> dict:
        created = self._date(m.created_ts)
        base = f"{self.messages_path}/{m.sid}"
        return {
            "account_sid": self.account_sid,
            "api_version": API_VERSION,
            "body": m.body,
            "date_created": created,
            "date_sent": created,
            "date_updated": created if m.updated_ts == m.created_ts else self._date(m.updated_ts),
            "direction": "outbound-api",
            "error_code": m.error_code,
            "error_message": m.error_message,
            "from": m.from_ or None,
            "messaging_service_sid": m.messaging_service_sid or None,
            "num_media": "0",
            "num_segments": str(m.num_segments),
            "price": None,
            "price_unit": "USD",
            "sid": m.sid,
            "status": m.status,
            "subresource_uris": {"media": f"{base}/Media.json", "feedback": f"{base}/Feedback.json"},
            "to": m.to,
            "uri": f"{base}.json",
        }

    # -- list ---------------------------------------------------------------------------------------
    def query(
        self,
        *,
        to: str | None,
        from_: str | None,
        lo: int | None,
        hi: int | None,
        page: int,
        page_size: int,
        token: str | None,
    ) -> tuple[list[SandboxMessage], bool]:
        """One page, newest first, and whether an older page exists. Candidates come from the To/From
        index (the smaller when both are given); the date bounds are bisected, since created_ts never
        decreases along an index list."""
        residual_to = residual_from = None
        if to is not None and from_ is not None:
            by_to, by_from = self.by_to.get(to, []), self.by_from.get(from_, [])
            if len(by_to) <= len(by_from):
                candidates, residual_from = by_to, from_
            else:
                candidates, residual_to = by_from, to
        elif to is not None:
            candidates = self.by_to.get(to, [])
        elif from_ is not None:
            candidates = self.by_from.get(from_, [])
        else:
            candidates = self.all

        start = 0 if lo is None else bisect_left(candidates, lo, key=_ts)
        stop = len(candidates) if hi is None else bisect_right(candidates, hi, key=_ts)
        forward = False
        if token:
            anchor = self.messages.get(token[2:]) if token[:2] in ("PA", "PB") else None
            if anchor is None:
                raise BadRequest(20001, "Invalid PageToken")
            if token.startswith("PA"):  # older than the anchor
                stop = min(stop, bisect_left(candidates, anchor.seq, key=_seq))
            else:  # newer than the anchor (previous page)
                start = max(start, bisect_right(candidates, anchor.seq, key=_seq))
                forward = True

        def matches(m: SandboxMessage) -> bool:
            if residual_from is not None and m.from_ != residual_from:
                return False
            return residual_to is None or m.to == residual_to

        plain = residual_from is None and residual_to is None
        items: list[SandboxMessage] = []
        if forward:
            # the page just newer than the anchor: the oldest page_size matches above it
            for i in range(start, stop):
                m = candidates[i]
                if plain or matches(m):
                    items.append(m)
                    if len(items) == page_size:
                        break
            items.reverse()
            return items, True
        skip = 0 if token else page * page_size
        i = stop - 1
        if plain:
            i -= skip
            while i >= start and len(items) < page_size:
                items.append(candidates[i])
                i -= 1
            return items, i >= start
        while i >= start and len(items) < page_size:
            m = candidates[i]
            i -= 1
            if matches(m):
                if skip:
                    skip -= 1
                else:
                    items.append(m)
        while i >= start:  # is there one more match (an older page)?
            if matches(candidates[i]):
                return items, True
            i -= 1
        return items, False


# --- HTTP ------------------------------------------------------------------------------------------
_JSON = "application/json"


def _json(data: Any, status: int = 200, headers: dict | None = None) -> web.Response:
    return web.Response(body=json.dumps(data).encode(), status=status, content_type=_JSON, headers=headers)


def twilio_error(status: int, code: int, message: str, headers: dict | None = None) -> web.Response:
    return _json(
        {"code": code, "message": message, "more_info": f"{MORE_INFO}{code}", "status": status},
        status,
        headers,
    )


def _unauthorized() -> web.Response:
    return _json(
        {
            "code": 20003,
            "detail": "Your AccountSid or AuthToken was incorrect.",
            "message": "Authenticate",
            "more_info": f"{MORE_INFO}20003",
            "status": 401,
        },
        401,
        {"WWW-Authenticate": 'Basic realm="Twilio API"'},
    )


def _retry_after_header(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)


class SandboxApp:
    def __init__(self, state: SandboxState) -> None:
        self.state = state

    # -- Twilio API ---------------------------------------------------------------------------------
    async def create_message(self, request: web.Request) -> web.Response:
        st = self.state
        st.in_flight += 1
        if st.in_flight > st.max_in_flight:
            st.max_in_flight = st.in_flight
        transport = request.transport
        if transport is not None:
            st.peers.add(transport.get_extra_info("peername"))
        try:
            return await self._create_message(request)
        finally:
            st.in_flight -= 1

    async def _create_message(self, request: web.Request) -> web.Response:
        st = self.state
        if not st.authorized(request, request.match_info["account_sid"]):
            st.outcomes["unauthorized"] += 1
            return _unauthorized()
        raw = await request.read()
        form = dict(parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True))
        to = form.get("To", "").strip()
        from_ = form.get("From", "").strip()
        body = form.get("Body", "")
        service = form.get("MessagingServiceSid", "").strip()
        error = None
        if not to:
            error = (21604, "A 'To' phone number is required.")
        elif not _E164ISH.fullmatch(to):
            error = (21211, f"The 'To' number {to} is not a valid phone number.")
        elif not from_ and not service:
            error = (21603, "A 'From' phone number is required.")
        elif not body and not form.get("MediaUrl") and not form.get("ContentSid"):
            error = (21602, "Message body is required.")
        elif len(body) > MAX_BODY_CHARS:
            error = (21617, "The concatenated message body exceeds the 1600 character limit.")
        if error is not None:
            st.outcomes["invalid_request"] += 1
            return twilio_error(400, *error)

        cfg = st.config
        if cfg.latency_ms:
            await asyncio.sleep(cfg.latency_ms / 1000.0)
        fault = st.pick_fault(to)
        if fault is None:
            message = st.store(to, from_, body, service, form.get("StatusCallback", ""))
            st.outcomes["accepted"] += 1
            response = _json(st.render(message), 201)
            if message.status_callback:  # an "early" callback goes out before this answer
                await st.callbacks.before_response(message)
            return response

        action, rule = fault
        if action == "500":
            st.outcomes["error_500"] += 1
            return twilio_error(500, 20500, "An internal server error has occurred")
        if action == "503":
            st.outcomes["error_503"] += 1
            return twilio_error(503, 20503, "Service unavailable")
        if action == "429":
            st.outcomes["error_429"] += 1
            seconds = (rule or {}).get("retry_after_seconds", cfg.retry_after_seconds)
            return twilio_error(
                429, 20429, "Too Many Requests", {"Retry-After": _retry_after_header(seconds)}
            )
        if action == "400":
            st.outcomes["error_400"] += 1
            code = (rule or {}).get("error_code", cfg.error_code_400)
            return twilio_error(400, code, f"Error {code} (injected by the sandbox)")
        if action == "timeout":
            st.outcomes["timeout"] += 1
            await asyncio.sleep(cfg.timeout_hang_seconds)
            return twilio_error(503, 20503, "Service unavailable")
        # accept_then_hang: the provider has it; the client will not hear about it in time
        message = st.store(to, from_, body, service, form.get("StatusCallback", ""))
        st.outcomes["accept_then_hang"] += 1
        response = _json(st.render(message), 201)
        if message.status_callback:
            await st.callbacks.before_response(message)
        await asyncio.sleep(cfg.timeout_hang_seconds)
        return response

    async def fetch_message(self, request: web.Request) -> web.Response:
        st = self.state
        if not st.authorized(request, request.match_info["account_sid"]):
            return _unauthorized()
        message = st.messages.get(request.match_info["sid"])
        if message is None:
            return twilio_error(404, 20404, f"The requested resource {request.path} was not found")
        return _json(st.render(message))

    async def list_messages(self, request: web.Request) -> web.Response:
        st = self.state
        if not st.authorized(request, request.match_info["account_sid"]):
            return _unauthorized()
        q = request.query
        try:
            page_size = int(q.get("PageSize", DEFAULT_PAGE_SIZE))
            page = int(q.get("Page", 0))
        except ValueError:
            return twilio_error(400, 20001, "Invalid Page or PageSize")
        if not 1 <= page_size <= MAX_PAGE_SIZE or page < 0:
            return twilio_error(400, 20001, f"PageSize must be between 1 and {MAX_PAGE_SIZE}")
        filters: list[tuple[str, str]] = []
        lo = hi = None
        try:
            for key in ("DateSent", "DateSent>", "DateSent<"):
                if key not in q:
                    continue
                first, last = _parse_date_bound(key, q[key])
                if key == "DateSent":  # "a specific sent_date": the whole UTC day, even for a datetime
                    first -= first % 86400
                    last = first + 86399
                filters.append((key, q[key]))
                if key != "DateSent<":  # on or after
                    lo = first if lo is None else max(lo, first)
                if key != "DateSent>":  # on or before
                    hi = last if hi is None else min(hi, last)
            to = q.get("To")
            from_ = q.get("From")
            items, has_older = st.query(
                to=to,
                from_=from_,
                lo=lo,
                hi=hi,
                page=page,
                page_size=page_size,
                token=q.get("PageToken"),
            )
        except BadRequest as exc:
            return twilio_error(400, exc.code, exc.message)
        if from_ is not None:
            filters.insert(0, ("From", from_))
        if to is not None:
            filters.insert(0, ("To", to))
        path = f"{st.messages_path}.json"

        def page_uri(number: int, token: str | None) -> str:
            params = [*filters, ("PageSize", str(page_size)), ("Page", str(number))]
            if token:
                params.append(("PageToken", token))
            return f"{path}?{urlencode(params)}"

        next_uri = page_uri(page + 1, "PA" + items[-1].sid) if items and has_older else None
        prev_uri = page_uri(page - 1, "PB" + items[0].sid) if items and page > 0 else None
        start = page * page_size
        return _json(
            {
                "messages": [st.render(m) for m in items],
                "end": start + max(len(items) - 1, 0),
                "first_page_uri": page_uri(0, None),
                "next_page_uri": next_uri,
                "page": page,
                "page_size": page_size,
                "previous_page_uri": prev_uri,
                "start": start,
                "uri": request.path_qs,
            }
        )

    # -- control API --------------------------------------------------------------------------------
    async def get_config(self, request: web.Request) -> web.Response:
        return _json(self.state.config.to_json())

    async def post_config(self, request: web.Request) -> web.Response:
        try:
            changes = await request.json()
            config = self.state.config.updated(changes)
        except (ValueError, TypeError) as exc:
            return _json({"error": str(exc)}, 400)
        self.state.set_config(config)
        return _json(config.to_json())

    async def get_stats(self, request: web.Request) -> web.Response:
        return _json(self.state.stats())

    async def post_callbacks_replay(self, request: web.Request) -> web.Response:
        try:
            payload = await request.json()
        except ValueError:
            payload = None
        if not isinstance(payload, dict) or not (payload.get("all") is True or payload.get("sid")):
            return _json({"error": 'expected {"sid": "SM..."} or {"all": true}'}, 400)
        if payload.get("all") is True:
            result = self.state.callbacks.replay(everything=True)
        else:
            result = self.state.callbacks.replay(sid=str(payload["sid"]))
        if result is None:
            return _json({"error": "no such message with status callbacks"}, 404)
        return _json(result)

    async def post_reset(self, request: web.Request) -> web.Response:
        self.state.reset()
        return _json({"reset": True, "config": self.state.config.to_json()})

    async def health(self, request: web.Request) -> web.Response:
        return _json({"status": "ok", "submissions": len(self.state.all)})


def build_app(state: SandboxState) -> web.Application:
    handlers = SandboxApp(state)
    app = web.Application(client_max_size=1024 * 1024)
    app["sandbox_state"] = state
    app.on_cleanup.append(state.callbacks.close)
    base = f"/{API_VERSION}/Accounts/{{account_sid}}"
    app.router.add_post(f"{base}/Messages.json", handlers.create_message)
    app.router.add_get(f"{base}/Messages.json", handlers.list_messages, allow_head=False)
    app.router.add_get(f"{base}/Messages/{{sid}}.json", handlers.fetch_message, allow_head=False)
    app.router.add_get("/_sandbox/config", handlers.get_config, allow_head=False)
    app.router.add_post("/_sandbox/config", handlers.post_config)
    app.router.add_get("/_sandbox/stats", handlers.get_stats, allow_head=False)
    app.router.add_post("/_sandbox/reset", handlers.post_reset)
    app.router.add_post("/_sandbox/callbacks/replay", handlers.post_callbacks_replay)
    app.router.add_get("/_sandbox/health", handlers.health)
    return app


# --- entry point -----------------------------------------------------------------------------------
def _env(name: str, default: Any) -> Any:
    value = os.environ.get(name)
    return default if value in (None, "") else value


def _flag_bool(value: Any) -> bool:
    try:
        return as_bool("flag", value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    d = SandboxConfig()
    p = argparse.ArgumentParser(
        prog="python -m delivery.sandbox", description="Sandbox SMS provider speaking Twilio's API."
    )
    p.add_argument("--host", default=_env("SANDBOX_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(_env("SANDBOX_PORT", 8081)), help="0 = any free port")
    p.add_argument("--account-sid", default=_env("TWILIO_ACCOUNT_SID", DEFAULT_ACCOUNT_SID))
    p.add_argument("--auth-token", default=_env("TWILIO_AUTH_TOKEN", DEFAULT_AUTH_TOKEN))
    for f in fields(SandboxConfig):
        if f.name == "rules":
            continue
        env = "SANDBOX_" + f.name.upper()
        kind = int if f.name in _INT_RANGES else _flag_bool if f.name in _BOOL_KEYS else float
        p.add_argument(
            "--" + f.name.replace("_", "-"),
            type=kind,
            default=kind(_env(env, getattr(d, f.name))),
            help=f"(env {env})",
        )
    p.add_argument("--rules", default=_env("SANDBOX_RULES", "[]"), help="JSON list (env SANDBOX_RULES)")
    p.add_argument("--seed", type=int, default=_env("SANDBOX_SEED", None), help="(env SANDBOX_SEED)")
    p.add_argument("--log-level", default=_env("SANDBOX_LOG_LEVEL", "WARNING"))
    return p.parse_args(argv)


async def serve(state: SandboxState, host: str, port: int, stop: asyncio.Event) -> None:
    runner = web.AppRunner(build_app(state), access_log=None, shutdown_timeout=0.5, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=2048, reuse_address=True)
    await site.start()
    sockets = getattr(site._server, "sockets", None) or []
    bound_port = sockets[0].getsockname()[1] if sockets else port
    print(f"sandbox listening on http://{host}:{bound_port}", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        config = SandboxConfig().updated(
            {
                **{f.name: getattr(args, f.name) for f in fields(SandboxConfig) if f.name != "rules"},
                "rules": json.loads(args.rules),
            }
        )
    except ValueError as exc:
        raise SystemExit(f"sandbox: bad configuration: {exc}") from None
    state = SandboxState(
        account_sid=args.account_sid, auth_token=args.auth_token, config=config, seed=args.seed
    )

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(state, args.host, args.port, stop)

    asyncio.run(run())
    return 0
