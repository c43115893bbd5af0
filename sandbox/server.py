"""The sandbox provider: an aiohttp.web server speaking Twilio's Messages API, plus a control API.

Twilio surface (HTTP Basic auth ``AccountSid:AuthToken``; every call answers 401/20003 while
``auth_fail`` is set, and 503/20503 while ``outage`` is ``503``; with ``outage`` ``refuse`` its port is
closed):

* ``POST /2010-04-01/Accounts/{AccountSid}/Messages.json`` (form: To, From | MessagingServiceSid, Body,
  StatusCallback, ValidityPeriod, ...) -> 201 message resource, or a Twilio-shaped error; the
  ``store_then_*`` faults store the message and then answer 500/20500, 503/20503 or nothing.
* ``GET /2010-04-01/Accounts/{AccountSid}/Messages/{Sid}.json`` -> the resource or 404 (code 20404).
* ``GET /2010-04-01/Accounts/{AccountSid}/Messages.json`` with ``To``, ``From``, ``DateSent``,
  ``DateSent<``, ``DateSent>`` (a date ``YYYY-MM-DD`` or an ISO datetime, on ``date_sent``), unsent
  messages first (newest first), then by ``date_sent`` newest first, paged with ``PageSize`` (default 50,
  max 1000), ``Page`` and ``PageToken`` exactly as the SDK follows them; with ``list_lag_seconds`` the
  messages created less than that long ago are left out.
* ``GET /2010-04-01/Accounts/{AccountSid}.json`` -> the Account resource (a credentials probe).

A message's lifecycle (``lifecycle.py``) is fixed at create and derived from the clock at every read:
queued | accepted -> (service sends: queued once a sender is assigned) -> sent at its release from the
per-sender and account queues -> delivered | undelivered, or failed without ever being sent.

Control surface (JSON, unauthenticated: bind it to localhost), on the main port and, with
``--control-port``, on a listener of its own that stays up in every outage mode:

* ``GET/POST /_sandbox/config`` -- fault injection and queue settings (see ``SandboxConfig``); POST merges
  the given keys.
* ``GET /_sandbox/stats`` -- ``{"submissions": stored, "account": {...}, "by_outcome": {...},
  "rejections": {code: n}, "by_status": {...}, "senders": {...}, "callbacks": {"sent", "failed",
  "dropped", "pending", ...}, "callback_results": {"ok", "ct", "rt", "4xx", "5xx"}}``; the most
  submissions and segments in any sliding second per sender and
  for the account (``SlidingWindow``).
* ``GET /_sandbox/submissions?since=<unix seconds>`` -- ``[[created, sender, segments, to], ...]`` of the
  messages created since then, streamed.
* ``GET /_sandbox/messages/{sid}`` -- a message's internals: the form received, ValidityPeriod, its
  assign / release / final instants and its timeline.
* ``POST /_sandbox/callbacks/replay`` -- ``{"sid": "SM..."}`` or ``{"all": true}``: send a message's
  status callbacks that are due so far again (see ``callbacks.py``).
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
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode

from aiohttp import web

from sandbox.callbacks import StatusCallbackHook, parse_retry_policy, retry_policy_set
from sandbox.lifecycle import (
    ERROR_MESSAGES,
    INF,
    TRIAL_PREFIX,
    SandboxMessage,
    count_segments,
    default_service_sid,
    price,
    rfc2822,
    service_sender,
)

logger = logging.getLogger("sandbox")

__all__ = [
    "SandboxConfig",
    "SandboxMessage",
    "SandboxState",
    "build_app",
    "count_segments",
    "main",
    "rfc2822",
]

API_VERSION = "2010-04-01"
DEFAULT_ACCOUNT_SID = "AC" + "0" * 32
DEFAULT_AUTH_TOKEN = "sandbox-auth-token"
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
MAX_BODY_CHARS = 1600
# Twilio: ValidityPeriod "Accepted values are integers from 1 to 36000. Default value is 36000."
# (twilio-oai spec/json/twilio_api_v2010.json, CreateMessageRequest)
MAX_VALIDITY_PERIOD = 36000
MORE_INFO = "https://www.twilio.com/docs/errors/"
SUBMISSIONS_CHUNK = 10_000  # rows of /_sandbox/submissions encoded at a time, between which creates run

RATE_KEYS = (
    "error_rate_5xx",
    "error_rate_429",
    "error_rate_400",
    "timeout_rate",
    "accept_then_hang_rate",
    "store_then_500_rate",
    "store_then_503_rate",
    "store_then_drop_rate",
)
CALLBACK_SHARE_KEYS = ("callback_delivered_share", "callback_undelivered_share", "callback_failed_share")
_UNIT_KEYS = frozenset((*RATE_KEYS, *CALLBACK_SHARE_KEYS, "callback_drop_rate", "callback_early_rate"))
_INT_RANGES = {
    "error_code_400": (0, None),
    "callback_repeat": (1, 100),
    "callback_retries": (0, 10),
    "max_concurrent_requests": (0, None),
}
_BOOL_KEYS = frozenset(
    ("callbacks_enabled", "callback_shuffle", "auth_fail", "trial_prefix", "default_messaging_service")
)
_STR_KEYS = frozenset(("callback_retry_policy", "callback_shared_key_id", "callback_shared_key_secret"))
_LIST_KEYS = frozenset(("opted_out",))
# "none"; "503": every Twilio API call answers 503/20503; "refuse": the API listener is closed
OUTAGE_MODES = ("none", "503", "refuse")
_CHOICE_KEYS = {"outage": OUTAGE_MODES}
RULE_ACTIONS = (
    "500",
    "503",
    "429",
    "400",
    "timeout",
    "accept_then_hang",
    "store_then_500",
    "store_then_503",
    "store_then_drop",
)
# actions whose message is stored before the (missing, late or wrong) answer
STORED_ACTIONS = frozenset(("accept_then_hang", "store_then_500", "store_then_503", "store_then_drop"))
OUTCOMES = (
    "accepted",
    "error_500",
    "error_503",
    "error_429",
    "error_400",
    "timeout",
    "accept_then_hang",
    "store_then_500",
    "store_then_503",
    "store_then_drop",
    "invalid_request",
    "unauthorized",
    "concurrency_limited",
    "queue_full",
    "opted_out",
    "outage_503",
)

_E164ISH = re.compile(r"\+?[1-9][0-9]{4,14}")
_DATE_ONLY = re.compile(r"\d{4}-\d{2}-\d{2}")
_DIGITS = re.compile(r"[0-9]{1,6}")


# --- configuration ---------------------------------------------------------------------------------
@dataclass
class SandboxConfig:
    """Fault injection and Twilio's queueing. Rates are shares of submits (0..1, summing to at most 1);
    rules come first."""

    latency_ms: float = 0.0  # added to every submit (asyncio.sleep, non-blocking)
    error_rate_5xx: float = 0.0  # answered 500 or 503, nothing stored
    error_rate_429: float = 0.0  # answered 429 + Retry-After, nothing stored
    retry_after_seconds: float = 1.0
    error_rate_400: float = 0.0  # answered 400 with error_code_400, nothing stored
    error_code_400: int = 21211
    timeout_rate: float = 0.0  # nothing stored, hang timeout_hang_seconds, then 503
    timeout_hang_seconds: float = 30.0
    accept_then_hang_rate: float = 0.0  # stored, hang timeout_hang_seconds, then 201
    store_then_500_rate: float = 0.0  # stored (listed, sent, its callbacks), yet answered 500/20500
    store_then_503_rate: float = 0.0  # stored, yet answered 503/20503
    store_then_drop_rate: float = 0.0  # stored, then the connection is closed without an answer
    # GET Messages.json hides the messages created less than this many seconds ago (fetch does not)
    list_lag_seconds: float = 0.0
    # [{"to": "+1...", "action": one of RULE_ACTIONS, "times": N | None (unlimited),
    #   "error_code": int (400 only), "retry_after_seconds": float (429 only)}], matched by exact To
    rules: list[dict] = field(default_factory=list)
    # the lifecycle (lifecycle.py) and each sender's queue
    queue_delay_ms: float = 0.0  # least time every message waits in the queue before "sent"
    sender_rate: float = 0.0  # segments per second per sender; 0 = unlimited
    account_rate: float = 0.0  # segments per second across all senders of the account; 0 = unlimited
    # a sender's queue holds this many seconds of sending at sender_rate (Twilio: 10 h, support
    # article 115002943027), and so does the account's at account_rate; past it a From send is refused
    # (21611), a service send fails (30001)
    queue_max_seconds: float = 36000.0
    service_assign_delay_ms: float = 0.0  # service send without From: accepted -> queued (sender chosen)
    callback_delivered_share: float = 0.0  # final status shares (sum <= 1); the rest is delivered too
    callback_undelivered_share: float = 0.0  # ErrorCode 30003
    callback_failed_share: float = 0.0  # failed at release instead of sent, ErrorCode 30008
    # status callbacks, for messages stored with a StatusCallback (callbacks.py)
    callbacks_enabled: bool = True
    callback_delay_ms: float = 500.0  # a status change -> its callback POST
    callback_gap_ms: float = 100.0  # sent -> the final status (in the store, hence in the callbacks)
    callback_repeat: int = 1  # copies of each callback
    callback_shuffle: bool = False  # a message's callbacks in random order
    callback_drop_rate: float = 0.0  # share of callbacks (copies) never sent
    callback_early_rate: float = 0.0  # share of messages whose first callback precedes the create answer
    callback_timeout_ms: float = 5000.0  # per POST attempt: connect, and each read
    callback_retries: int = 1  # Twilio's rc: retries after a failed attempt that the policy retries
    callback_retry_policy: str = "ct"  # Twilio's rp: ct, rt, 4xx, 5xx, all, or a comma list
    callback_total_timeout_ms: float = 15000.0  # Twilio's tt: all attempts of one callback; 0 = no cap
    callback_retry_backoff_ms: float = 100.0  # doubled on each retry
    # when both are set, callbacks are signed with this SharedKey (HMAC-SHA256) instead of the auth token
    callback_shared_key_id: str = ""
    callback_shared_key_secret: str = ""
    # account-level answers
    max_concurrent_requests: int = 0  # creates handled at once; past it 429/20429; 0 = unlimited
    concurrency_retry_after_seconds: float = 0.0  # Retry-After on that 429; 0 = no header
    auth_fail: bool = False  # every Twilio API call answers 401/20003
    opted_out: list[str] = field(default_factory=list)  # recipients who replied STOP (21610)
    trial_prefix: bool = False  # bodies get "Sent from your Twilio trial account - "
    # a send without MessagingServiceSid shows the account's default service in messaging_service_sid
    default_messaging_service: bool = True
    # "503": every Twilio API call answers 503/20503 at once; "refuse": the API listener is closed, so
    # connections to its port are refused (the control API stays up on --control-port)
    outage: str = "none"

    def to_json(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["rules"] = copy.deepcopy(self.rules)
        data["opted_out"] = list(self.opted_out)
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
            elif key == "callback_retry_policy":
                values[key] = parse_retry_policy(value)
            elif key in _STR_KEYS:
                if not isinstance(value, str):
                    raise ValueError(f"{key} must be a string")
            elif key in _LIST_KEYS:
                values[key] = as_list(key, value)
            elif key in _CHOICE_KEYS:
                choices = _CHOICE_KEYS[key]
                if value not in choices:
                    raise ValueError(f"{key} must be one of {', '.join(choices)}")
            else:
                values[key] = _as_float(key, value, 0.0, 1.0 if key in _UNIT_KEYS else math.inf)
        for group, what in ((RATE_KEYS, "rates"), (CALLBACK_SHARE_KEYS, "callback shares")):
            if sum(values[k] for k in group) > 1.0 + 1e-9:
                raise ValueError(f"the {what} ({', '.join(group)}) must sum to at most 1")
        return SandboxConfig(**values)

    @property
    def any_rate(self) -> bool:
        return any(getattr(self, k) for k in RATE_KEYS)


def as_list(key: str, value: Any) -> list[str]:
    """A JSON list of strings, or (flags, env) a JSON list or comma-separated text."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError:
                raise ValueError(f"{key} must be a list of strings") from None
        else:
            value = [item for item in text.split(",") if item.strip()]
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{key} must be a list of strings")
    return [item.strip() for item in value if item.strip()]


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


# --- errors and query parsing ----------------------------------------------------------------------
class BadRequest(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Refused(BadRequest):
    """A create Twilio answers synchronously with 400 and stores nothing (21610, 21611)."""

    def __init__(self, code: int, outcome: str) -> None:
        super().__init__(code, ERROR_MESSAGES[code])
        self.outcome = outcome


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


def _created(m: SandboxMessage) -> float:
    return m.created


def _rank(now: float, m: SandboxMessage) -> tuple[int, int, int]:
    """A message's place in a list at ``now``, ascending: unsent ones first (newest created first), then
    by date_sent, newest first, then newest created first. Twilio documents only "sorted by DateSent, most
    recent first"; where messages without a date_sent go is the sandbox's choice."""
    if m.final_status != "failed" and now >= m.release_at:
        return (1, -int(m.release_at), -m.seq)
    return (0, 0, -m.seq)


def _page_token(kind: str, snapshot_us: int, upto: int, rank: tuple[int, int, int]) -> str:
    """``PA`` (the page after) or ``PB`` (the page before) a message, in the order as of the snapshot the
    first page was cut from: later pages never shift while statuses change or messages arrive."""
    return f"{kind}{snapshot_us}.{upto}.{rank[0]}.{-rank[1]}.{-rank[2]}"


def _parse_page_token(token: str) -> tuple[bool, int, int, tuple[int, int, int]]:
    """(before, snapshot_us, upto, rank) of a token made by ``_page_token``."""
    parts = token[2:].split(".")
    if token[:2] not in ("PA", "PB") or len(parts) != 5 or not all(p.isdigit() for p in parts):
        raise BadRequest(20001, "Invalid PageToken")
    snapshot_us, upto, group, second, seq = (int(p) for p in parts)
    return token[:2] == "PB", snapshot_us, upto, (group, -second, -seq)


class SlidingWindow:
    """The most submissions and segments within any sliding 1-second window ``[t, t + 1)`` so far (not
    only whole clock seconds), for one sender or the account. ``add`` is O(1) amortised: the deque holds
    the messages of the last second, in created order (never decreasing, see ``store``)."""

    __slots__ = ("max_count", "max_segments", "recent", "segments")

    def __init__(self) -> None:
        self.recent: deque[SandboxMessage] = deque()
        self.segments = 0  # segments of the messages in ``recent``
        self.max_count = 0
        self.max_segments = 0

    def add(self, message: SandboxMessage) -> None:
        recent = self.recent
        t = message.created
        while recent and t - recent[0].created >= 1.0:
            self.segments -= recent.popleft().num_segments
        recent.append(message)
        self.segments += message.num_segments
        if len(recent) > self.max_count:
            self.max_count = len(recent)
        if self.segments > self.max_segments:
            self.max_segments = self.segments


class SandboxState:
    def __init__(
        self,
        *,
        account_sid: str = DEFAULT_ACCOUNT_SID,
        auth_token: str = DEFAULT_AUTH_TOKEN,
        config: SandboxConfig | None = None,
        seed: int | None = None,
        clock: Any = time.time,
    ) -> None:
        self.account_sid = account_sid
        self.auth_token = auth_token
        self.clock = clock  # wall-clock seconds; every status is derived from it
        self.started = clock()
        credentials = base64.b64encode(f"{account_sid}:{auth_token}".encode()).decode()
        self._expected_auth = f"Basic {credentials}"
        self.account_path = f"/{API_VERSION}/Accounts/{account_sid}"
        self.messages_path = f"{self.account_path}/Messages"
        self.start_config = (config or SandboxConfig()).updated({})  # validated copy
        self.seed = seed
        self._service_senders: dict[str, str] = {}
        self.default_service_sid = default_service_sid(account_sid)
        self.callbacks = StatusCallbackHook(self)
        self.journal = None  # sandbox.journal.Journal with --state-file
        self._restored: list[SandboxMessage] = []
        # the server's listeners (``Listeners``), when it runs them itself; None in process (unit tests)
        self.listeners: Listeners | None = None
        self.reset()

    # -- lifecycle ----------------------------------------------------------------------------------
    def reset(self) -> None:
        self.messages: dict[str, SandboxMessage] = {}
        self.all: list[SandboxMessage] = []
        self.by_to: dict[str, list[SandboxMessage]] = {}
        self.by_from: dict[str, list[SandboxMessage]] = {}  # by sender (a service send's assigned one)
        self.next_free: dict[str, float] = {}  # per sender: when its queue is free (sender_rate > 0)
        self.account_next_free = 0.0  # when the account's queue is free (account_rate > 0)
        self.windows: dict[str, SlidingWindow] = {}  # per sender: submissions in any 1 s
        self.account_window = SlidingWindow()
        self._next_seq = 0
        self._last_created = 0.0
        self._dates: dict[int, str] = {}
        self._lists: OrderedDict[tuple, list[SandboxMessage]] = OrderedDict()  # ordered list snapshots
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self.rejections: dict[int, int] = {}  # create answers other than 201, by Twilio error code
        # submits being handled right now (hangs included); survives a reset, since they still finish
        self.in_flight: int = getattr(self, "in_flight", 0)
        self.max_in_flight = self.in_flight
        self.peers: set = set()  # distinct client (host, port)s that submitted: TCP connections used
        self.rng = random.Random(self.seed)
        self.set_config(self.start_config.updated({}))
        self.callbacks.reset()
        if self.journal is not None:
            self.journal.truncate()  # a reset forgets the store, on disk too

    def set_config(self, config: SandboxConfig) -> None:
        self.config = config
        rules_by_to: dict[str, list[dict]] = {}
        for rule in config.rules:
            rules_by_to.setdefault(rule["to"], []).append(rule)
        self.rules_by_to = rules_by_to
        self.any_rate = config.any_rate
        self.opted_out = frozenset(config.opted_out)
        self.any_share = any(getattr(config, k) for k in CALLBACK_SHARE_KEYS)
        self.retry_policy = retry_policy_set(config.callback_retry_policy)
        self.api_down = config.outage != "none"  # checked first by every Twilio API call

    def reject(self, status: int, code: int, message: str, headers: dict | None = None) -> web.Response:
        self.rejections[code] = self.rejections.get(code, 0) + 1
        return twilio_error(status, code, message, headers)

    def outage_answer(self, request: web.Request, create: bool = False) -> web.Response:
        """A Twilio API call during an outage (``api_down``). ``503``: 503/20503 at once, nothing stored.
        ``refuse``: only a request already on a connection accepted before the listener closed gets here
        (new connections are refused); it is dropped like a reset."""
        if self.config.outage == "refuse":
            transport = request.transport
            if transport is not None:
                transport.abort()
            return twilio_error(503, 20503, "Service unavailable")
        self.outcomes["outage_503"] += 1
        if create:
            return self.reject(503, 20503, "Service unavailable")
        return twilio_error(503, 20503, "Service unavailable")

    def stats(self) -> dict:
        """Counters, plus ``by_status`` and per-sender figures derived from the store now (O(messages)).
        A sender's ``max_*_per_second`` is the most messages in one whole wall-clock second; its (and the
        account's) ``max_*_in_any_1s`` the most in any sliding second, kept up to date at each create."""
        now = self.clock()
        by_status: dict[str, int] = {}
        per_sender: dict[str, list] = {}
        for m in self.all:
            status = m.status_at(now)[0]
            by_status[status] = by_status.get(status, 0) + 1
            row = per_sender.get(m.sender)
            if row is None:
                row = per_sender[m.sender] = [0, 0, {}, {}]
            row[0] += 1
            row[2][m.created_ts] = row[2].get(m.created_ts, 0) + 1
            second = m.sent_second(now)
            if second is not None:
                row[1] += 1
                row[3][second] = row[3].get(second, 0) + 1
        windows = self.windows
        account = self.account_window
        return {
            "submissions": len(self.all),
            "account": {
                "submitted": len(self.all),
                "max_submitted_in_any_1s": account.max_count,
                "max_segments_in_any_1s": account.max_segments,
            },
            "by_outcome": dict(self.outcomes),
            "rejections": {str(code): n for code, n in sorted(self.rejections.items())},
            "by_status": by_status,
            "senders": {
                sender: {
                    "submitted": submitted,
                    "sent": sent,
                    "max_submitted_per_second": max(per_second.values(), default=0),
                    "max_sent_per_second": max(sent_per_second.values(), default=0),
                    "max_submitted_in_any_1s": windows[sender].max_count,
                    "max_segments_in_any_1s": windows[sender].max_segments,
                }
                for sender, (submitted, sent, per_second, sent_per_second) in per_sender.items()
            },
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "connections": len(self.peers),
            "callbacks": self.callbacks.stats(),
            "callback_results": self.callbacks.results_stats(),
        }

    # -- auth ---------------------------------------------------------------------------------------
    def authorized(self, request: web.Request, account_sid: str) -> bool:
        if self.config.auth_fail:
            return False
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
            ("store_then_500_rate", "store_then_500"),
            ("store_then_503_rate", "store_then_503"),
            ("store_then_drop_rate", "store_then_drop"),
        ):
            rate = getattr(cfg, key)
            if x < rate:
                if action == "5xx":
                    action = "500" if self.rng.random() < 0.5 else "503"
                return action, None
            x -= rate
        return None

    # -- store --------------------------------------------------------------------------------------
    def service_sender(self, service_sid: str) -> str:
        sender = self._service_senders.get(service_sid)
        if sender is None:
            sender = self._service_senders[service_sid] = service_sender(service_sid)
        return sender

    def store(
        self,
        to: str,
        from_: str,
        body: str,
        messaging_service_sid: str,
        status_callback: str,
        *,
        validity_period: int = MAX_VALIDITY_PERIOD,
        raw_form: bytes = b"",
    ) -> SandboxMessage:
        """Store a create and fix its lifecycle, or raise ``Refused`` (nothing stored) for a From send to an
        opted-out recipient (21610) or past its sender's or the account's queue (21611). O(1); no timer
        unless it has a StatusCallback.

        Release (leaving Twilio's queue, ``sent``) = the latest of assign + queue_delay, the sender's next
        free time (sender_rate) and the account's (account_rate); each then moves on by segments / rate."""
        cfg = self.config
        now = self.clock()
        if now < self._last_created:  # wall clock stepped back: keep created ordered with seq
            now = self._last_created
        from_given = bool(from_)
        sender = from_ if from_given else self.service_sender(messaging_service_sid)
        if cfg.trial_prefix:
            body = TRIAL_PREFIX + body
        assign_at = now if from_given else now + cfg.service_assign_delay_ms / 1000.0
        opted_out = to in self.opted_out
        if opted_out and from_given:
            # Twilio 21610 "Attempt to send to unsubscribed recipient" (twilio.com/docs/api/errors/21610)
            raise Refused(21610, "opted_out")
        message = SandboxMessage(
            self._next_seq,
            "SM" + os.urandom(16).hex(),
            to,
            sender,
            from_given,
            body,
            messaging_service_sid,
            now,
            status_callback,
        )
        message.assign_at = assign_at
        message.validity_period = validity_period
        message.raw_form = raw_form
        if opted_out:  # a service send: accepted, then failed when a sender would be chosen
            self._fail(message, 21610, assign_at)
            message.release_at = None
        else:
            segments = message.num_segments
            base = assign_at + cfg.queue_delay_ms / 1000.0
            release = base
            rate = cfg.sender_rate
            if rate > 0:
                free = self.next_free.get(sender)
                if free is not None and free > release:
                    release = free
            account_rate = cfg.account_rate
            # The account's capacity is taken in arrival order, at the account's own next free slot:
            # a message that then waits longer for its sender must not push every other sender's
            # messages behind it (the two limits are separate resources, not one queue).
            account_slot = max(self.account_next_free, base)
            if account_rate > 0 and account_slot > release:
                release = account_slot
            message.release_at = release
            expires = now + validity_period
            if (rate > 0 or account_rate > 0) and release - assign_at > cfg.queue_max_seconds:
                # Twilio: a sender queues at most 10 h of segments; past it a From send is refused with
                # 21611, a Messaging Service send "will instead fail after creation with error 30001"
                # (twilio.com/docs/api/errors/21611, /30001). The account's queue is bounded the same way
                # (release - assign <= queue_max_seconds holds iff it holds for each queue)
                if from_given:
                    raise Refused(21611, "queue_full")
                self._fail(message, 30001, assign_at)
            elif release > expires:
                # Twilio 30036: "When the time elapsed since the message was submitted exceeds
                # ValidityPeriod, Twilio does not send the message" (twilio.com/docs/api/errors/30036);
                # it takes no sending time from the sender's queue
                self._fail(message, 30036, expires)
                if assign_at > expires:
                    message.assign_at = INF  # expired before a sender was chosen
            else:
                if rate > 0:
                    self.next_free[sender] = release + segments / rate
                if account_rate > 0:
                    self.account_next_free = account_slot + segments / account_rate
                self._decide_final(message, release)
        self._last_created = now
        self._next_seq += 1
        self._index(message)
        if status_callback:
            self.callbacks.message_accepted(message)
        if self.journal is not None:
            self.journal.append(message)  # before the create is answered
        return message

    def _index(self, message: SandboxMessage) -> None:
        self.messages[message.sid] = message
        self.all.append(message)
        bucket = self.by_to.get(message.to)
        if bucket is None:
            self.by_to[message.to] = [message]
        else:
            bucket.append(message)
        bucket = self.by_from.get(message.sender)
        if bucket is None:
            self.by_from[message.sender] = [message]
        else:
            bucket.append(message)
        window = self.windows.get(message.sender)
        if window is None:
            window = self.windows[message.sender] = SlidingWindow()
        window.add(message)
        self.account_window.add(message)

    def journal_open(self, path: str) -> int:
        """Keep the store in ``path`` (sandbox.journal): the messages already there are loaded
        (their lifecycles as fixed at their create) and every new one is appended. Returns how many were
        loaded. Call before serving; their owed status callbacks are planned once the loop runs
        (``journal_callbacks``)."""
        from sandbox.journal import Journal

        journal = Journal(path)
        restored = journal.load() if os.path.getsize(path) else []
        for message in restored:
            self._index(message)
            rate, account_rate = self.config.sender_rate, self.config.account_rate
            if message.release_at is not None and message.release_at != INF:
                if rate > 0:
                    free = message.release_at + message.num_segments / rate
                    self.next_free[message.sender] = max(self.next_free.get(message.sender, 0.0), free)
                if account_rate > 0:
                    free = message.release_at + message.num_segments / account_rate
                    self.account_next_free = max(self.account_next_free, free)
        if restored:
            self._next_seq = max(m.seq for m in restored) + 1
            self._last_created = max(m.created for m in restored)
        self.journal = journal
        self._restored = restored
        return len(restored)

    def journal_callbacks(self) -> int:
        """Plan the status callbacks the restored messages are still owed; on the running loop."""
        planned = sum(self.callbacks.message_restored(m) for m in self._restored if m.has_callbacks)
        self._restored = []
        return planned

    @staticmethod
    def _fail(message: SandboxMessage, code: int, at: float) -> None:
        message.final_status = "failed"
        message.error_code = code
        message.end_at = at

    def _decide_final(self, message: SandboxMessage, release: float) -> None:
        """By the callback_*_share settings: delivered (the default), undelivered (30003, after the gap),
        or failed (30008, at the release, never sent)."""
        cfg = self.config
        final = "delivered"
        if self.any_share:
            x = self.rng.random()
            if x >= cfg.callback_delivered_share:
                x -= cfg.callback_delivered_share
                if x < cfg.callback_undelivered_share:
                    final = "undelivered"
                elif x - cfg.callback_undelivered_share < cfg.callback_failed_share:
                    final = "failed"
        if final == "failed":
            self._fail(message, 30008, release)
            return
        message.final_status = final
        message.error_code = 30003 if final == "undelivered" else None
        message.end_at = release + cfg.callback_gap_ms / 1000.0

    # -- views --------------------------------------------------------------------------------------
    def _date(self, ts: int) -> str:
        text = self._dates.get(ts)
        if text is None:
            if len(self._dates) > 4096:
                self._dates.clear()
            text = self._dates[ts] = rfc2822(ts)
        return text

    def render(self, m: SandboxMessage, now: float | None = None, *, initial: bool = False) -> dict:
        """The resource at ``now`` (default: the clock), or as created (the create answer)."""
        if initial:  # Twilio answers a create with the initial status, whatever happened since
            status, since = m.initial_status, m.created
            from_ = m.sender if m.from_given else None
            sent, final = None, False
        else:
            if now is None:
                now = self.clock()
            status, since = m.status_at(now)
            from_ = m.from_at(now)
            sent = m.sent_second(now)
            final = now >= m.end_at
        error = m.error_code if final else None
        base = f"{self.messages_path}/{m.sid}"
        return {
            "account_sid": self.account_sid,
            "api_version": API_VERSION,
            "body": m.body,
            "date_created": self._date(m.created_ts),
            "date_sent": None if sent is None else self._date(sent),
            "date_updated": self._date(int(since)),
            "direction": "outbound-api",
            "error_code": error,
            "error_message": None if error is None else ERROR_MESSAGES[error],
            "from": from_,
            "messaging_service_sid": self._service_sid_of(m),
            "num_media": "0",
            "num_segments": "0" if from_ is None else str(m.num_segments),
            "price": None if sent is None else price(m.num_segments),
            "price_unit": "USD",
            "sid": m.sid,
            "status": status,
            "subresource_uris": {"media": f"{base}/Media.json", "feedback": f"{base}/Feedback.json"},
            "to": m.to,
            "uri": f"{base}.json",
        }

    def _service_sid_of(self, m: SandboxMessage) -> str | None:
        """The given MessagingServiceSid; for a send without one, the account's default service. Twilio's
        Message resource: messaging_service_sid "The SID of the Messaging Service associated with the
        Message resource. A unique default value is assigned if a Messaging Service is not used"
        (twilio-oai spec/json/twilio_api_v2010.json, api.v2010.account.message); since April 2024 "POST
        request will return the messaging_service_sid parameter with a default value for messages which
        did not specify one ... unique for each account_sid" (twilio.com/en-us/changelog,
        "Messaging API response & Logs with default messaging service"; help.twilio.com/articles/
        23584481873307). The status callbacks keep MessagingServiceSid for given services only: Twilio's
        sources say nothing of the default service there."""
        if m.messaging_service_sid:
            return m.messaging_service_sid
        return self.default_service_sid if self.config.default_messaging_service else None

    def debug(self, m: SandboxMessage) -> dict:
        """``GET /_sandbox/messages/{sid}``: what the client sent and the lifecycle fixed at create."""
        form: dict[str, Any] = {}
        for key, value in parse_qsl(m.raw_form.decode("utf-8", "replace"), keep_blank_values=True):
            if key in form:
                form[key] = [*form[key], value] if isinstance(form[key], list) else [form[key], value]
            else:
                form[key] = value
        now = self.clock()

        def instant(t: float | None) -> float | None:
            return None if t is None or t == INF else t

        return {
            "sid": m.sid,
            "seq": m.seq,
            "form": form,
            "status_callback": m.status_callback or None,
            "validity_period": m.validity_period,
            "status": m.status_at(now)[0],
            "initial_status": m.initial_status,
            "sender": m.sender,
            "num_segments": m.num_segments,
            "created_at": m.created,
            "assigned_at": instant(m.assign_at),
            "release_at": instant(m.release_at),
            "sent_at": m.release_at if m.sent else None,
            "final_at": m.end_at,
            "final_status": m.final_status,
            "error_code": m.error_code,
            "timeline": [{"status": status, "at": at} for status, at in m.timeline()],
            "callbacks": m.has_callbacks,
            "now": now,
        }

    def submission_chunks(self, since: float, chunk: int = SUBMISSIONS_CHUNK) -> Iterator[bytes]:
        """``GET /_sandbox/submissions``: the JSON list ``[[created, sender, segments, to], ...]`` of the
        stored messages created at or after ``since`` (unix seconds), oldest first, in pieces of ``chunk``
        rows. The messages are those stored when the first piece is taken (``created`` never decreases
        along ``all``, so the start is a bisection)."""
        messages = self.all
        start = bisect_left(messages, since, key=_created)
        stop = len(messages)
        yield b"["
        dumps = json.dumps
        for i in range(start, stop, chunk):
            rows = [(m.created, m.sender, m.num_segments, m.to) for m in messages[i : min(i + chunk, stop)]]
            text = dumps(rows, separators=(",", ":"))[1:-1]
            yield (text if i == start else "," + text).encode()
        yield b"]"

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
    ) -> tuple[list[SandboxMessage], str | None, str | None]:
        """One page and the tokens of the pages after and before it (None at an end).

        The first page fixes a snapshot (an instant and the messages created by then); its tokens carry
        it, so every later page is cut from the same order and filters: no duplicates or gaps while
        statuses move on between requests, and messages created since never show up mid-listing."""
        if token:
            before, snapshot_us, upto, anchor = _parse_page_token(token)
        else:
            before, snapshot_us, upto, anchor = False, int(self.clock() * 1e6), self._next_seq, None
        ordered = self._ordered(to, from_, lo, hi, snapshot_us, upto)
        now = snapshot_us / 1e6

        def rank(m: SandboxMessage) -> tuple[int, int, int]:
            return _rank(now, m)

        if anchor is None:
            start = page * page_size
            stop = start + page_size
        elif before:
            stop = bisect_left(ordered, anchor, key=rank)
            start = max(0, stop - page_size)
        else:
            start = bisect_right(ordered, anchor, key=rank)
            stop = start + page_size
        items = ordered[start:stop]
        next_token = prev_token = None
        if items and stop < len(ordered):
            next_token = _page_token("PA", snapshot_us, upto, rank(items[-1]))
        if items and start > 0:
            prev_token = _page_token("PB", snapshot_us, upto, rank(items[0]))
        return items, next_token, prev_token

    def _ordered(
        self, to: str | None, from_: str | None, lo: int | None, hi: int | None, snapshot_us: int, upto: int
    ) -> list[SandboxMessage]:
        """The matching messages among the first ``upto``, in list order, as of the snapshot. O(bucket):
        candidates come from the To or From index (the smaller when both are given); kept for the
        following pages of the same listing."""
        lag = self.config.list_lag_seconds
        key = (to, from_, lo, hi, snapshot_us, upto, lag)
        cached = self._lists.get(key)
        if cached is not None:
            self._lists.move_to_end(key)
            return cached
        if to is not None and from_ is not None:
            by_to, by_from = self.by_to.get(to, []), self.by_from.get(from_, [])
            candidates = by_to if len(by_to) <= len(by_from) else by_from
        elif to is not None:
            candidates = self.by_to.get(to, [])
        elif from_ is not None:
            candidates = self.by_from.get(from_, [])
        else:
            candidates = self.all
        now = snapshot_us / 1e6
        # list_lag_seconds: a message younger than the lag is not listed yet. Twilio documents no freshness
        # for the Messages list; its users report minutes (twilio/twilio-java#442) to hours
        # (twilio/twilio-node#647) before a sent message shows up in it.
        newest = now - lag if lag > 0 else math.inf
        dated = lo is not None or hi is not None
        out = []
        for m in candidates:  # in seq order, hence in created order
            if m.seq >= upto or m.created > newest:
                break
            if to is not None and m.to != to:
                continue
            if from_ is not None and (m.sender != from_ or m.from_at(now) is None):
                continue  # From matches the current from: not a service send still without a sender
            if dated:
                second = m.sent_second(now)  # a message not sent yet matches no DateSent filter
                if second is None or (lo is not None and second < lo) or (hi is not None and second > hi):
                    continue
            out.append(m)
        out.sort(key=lambda m: _rank(now, m))
        self._lists[key] = out
        if len(self._lists) > 8:
            self._lists.popitem(last=False)
        return out


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
    # Twilio 20003 Permission Denied, HTTP 401 (twilio.com/docs/api/errors/20003)
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


def _validity_period(form: dict[str, str]) -> int | None:
    """The ValidityPeriod form field (default 36000), or None when it is not an integer 1..36000."""
    raw = form.get("ValidityPeriod")
    if raw is None:
        return MAX_VALIDITY_PERIOD
    raw = raw.strip()
    if not _DIGITS.fullmatch(raw) or not 1 <= int(raw) <= MAX_VALIDITY_PERIOD:
        return None
    return int(raw)


class SandboxApp:
    def __init__(self, state: SandboxState) -> None:
        self.state = state

    # -- Twilio API ---------------------------------------------------------------------------------
    async def create_message(self, request: web.Request) -> web.Response:
        st = self.state
        if st.api_down:
            return st.outage_answer(request, create=True)
        cap = st.config.max_concurrent_requests
        if cap and st.in_flight >= cap:
            # Twilio 20429: "your account exceeds allowed concurrency ... Requests that receive 429
            # responses aren't processed" (twilio.com/docs/api/errors/20429). No Twilio source mentions a
            # Retry-After header, so there is none unless concurrency_retry_after_seconds is set.
            st.outcomes["concurrency_limited"] += 1
            seconds = st.config.concurrency_retry_after_seconds
            headers = {"Retry-After": _retry_after_header(seconds)} if seconds > 0 else None
            return st.reject(429, 20429, "Too Many Requests", headers)
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
            st.rejections[20003] = st.rejections.get(20003, 0) + 1
            return _unauthorized()
        raw = await request.read()
        form = dict(parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True))
        to = form.get("To", "").strip()
        from_ = form.get("From", "").strip()
        body = form.get("Body", "")
        service = form.get("MessagingServiceSid", "").strip()
        validity = _validity_period(form)
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
        elif validity is None:
            # Twilio 21624 "Invalid validity period value": "Validity period can only be set to integers
            # between 1 and 36,000 seconds (10 hours max)" (twilio.com/docs/api/errors/21624); the same
            # range as twilio-oai CreateMessageRequest, ValidityPeriod
            error = (21624, "Invalid validity period value")
        if error is not None:
            st.outcomes["invalid_request"] += 1
            return st.reject(400, *error)

        cfg = st.config
        if cfg.latency_ms:
            await asyncio.sleep(cfg.latency_ms / 1000.0)
        fault = st.pick_fault(to)
        if fault is None or fault[0] in STORED_ACTIONS:
            try:
                message = st.store(
                    to,
                    from_,
                    body,
                    service,
                    form.get("StatusCallback", ""),
                    validity_period=validity,
                    raw_form=raw,
                )
            except Refused as exc:
                st.outcomes[exc.outcome] += 1
                return st.reject(400, exc.code, exc.message)
            if message.status_callback:  # an "early" callback goes out before this answer
                await st.callbacks.before_response(message)
            return await self._answer_stored(request, message, None if fault is None else fault[0])

        action, rule = fault
        if action == "500":
            st.outcomes["error_500"] += 1
            return st.reject(500, 20500, "An internal server error has occurred")
        if action == "503":
            st.outcomes["error_503"] += 1
            return st.reject(503, 20503, "Service unavailable")
        if action == "429":
            st.outcomes["error_429"] += 1
            seconds = (rule or {}).get("retry_after_seconds", cfg.retry_after_seconds)
            return st.reject(429, 20429, "Too Many Requests", {"Retry-After": _retry_after_header(seconds)})
        if action == "400":
            st.outcomes["error_400"] += 1
            code = (rule or {}).get("error_code", cfg.error_code_400)
            return st.reject(400, code, f"Error {code} (injected by the sandbox)")
        # timeout: nothing stored, the answer comes too late
        st.outcomes["timeout"] += 1
        await asyncio.sleep(cfg.timeout_hang_seconds)
        return st.reject(503, 20503, "Service unavailable")

    async def _answer_stored(
        self, request: web.Request, message: SandboxMessage, action: str | None
    ) -> web.Response:
        """The answer to a create whose message is stored (listed, fetched, sent, its callbacks posted):
        201, or by ``action`` a late 201, an error or none at all."""
        st = self.state
        if action is None:
            st.outcomes["accepted"] += 1
            return _json(st.render(message, initial=True), 201)
        st.outcomes[action] += 1
        if action == "accept_then_hang":  # the provider has it; the client will not hear about it in time
            await asyncio.sleep(st.config.timeout_hang_seconds)
            return _json(st.render(message, initial=True), 201)
        if action == "store_then_500":
            # Twilio 20500: "sending an SMS ... [is] not idempotent. If you get a 500 Server Error on these
            # requests, and you retry the request, it is possible for a customer to receive multiple
            # messages" (twilio.com/docs/api/errors/20500): a 500 does not say the message was not taken
            return st.reject(500, 20500, "An internal server error has occurred")
        if action == "store_then_503":
            # Twilio 20503 "Service unavailable", HTTP 503 (twilio.com/docs/api/errors/20503); like the
            # 500, nothing in it says the request was not processed
            return st.reject(503, 20503, "Service unavailable")
        # store_then_drop: the connection is closed with the message stored and no answer written (a
        # proxy or load balancer dropping the response; the sandbox's own model, no Twilio source)
        transport = request.transport
        if transport is not None:
            transport.abort()
        return web.Response(status=500)  # never written: the connection is gone

    async def fetch_message(self, request: web.Request) -> web.Response:
        st = self.state
        if st.api_down:
            return st.outage_answer(request)
        if not st.authorized(request, request.match_info["account_sid"]):
            return _unauthorized()
        message = st.messages.get(request.match_info["sid"])
        if message is None:
            return twilio_error(404, 20404, f"The requested resource {request.path} was not found")
        return _json(st.render(message))

    async def fetch_account(self, request: web.Request) -> web.Response:
        """Twilio's Account fetch (``GET /2010-04-01/Accounts/{Sid}.json``), without ``auth_token``: lets a
        client check its credentials without sending a message."""
        st = self.state
        if st.api_down:
            return st.outage_answer(request)
        if not st.authorized(request, request.match_info["account_sid"]):
            return _unauthorized()
        created = st._date(int(st.started))
        path = st.account_path
        return _json(
            {
                "date_created": created,
                "date_updated": created,
                "friendly_name": "Sandbox account",
                "owner_account_sid": st.account_sid,
                "sid": st.account_sid,
                "status": "active",
                "subresource_uris": {
                    "messages": f"{path}/Messages.json",
                    "balance": f"{path}/Balance.json",
                },
                "type": "Trial" if st.config.trial_prefix else "Full",
                "uri": f"{path}.json",
            }
        )

    async def list_messages(self, request: web.Request) -> web.Response:
        st = self.state
        if st.api_down:
            return st.outage_answer(request)
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
            items, next_token, prev_token = st.query(
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

        now = st.clock()
        start = page * page_size
        return _json(
            {
                "messages": [st.render(m, now) for m in items],
                "end": start + max(len(items) - 1, 0),
                "first_page_uri": page_uri(0, None),
                "next_page_uri": page_uri(page + 1, next_token) if next_token else None,
                "page": page,
                "page_size": page_size,
                "previous_page_uri": page_uri(max(page - 1, 0), prev_token) if prev_token else None,
                "start": start,
                "uri": request.path_qs,
            }
        )

    # -- control API --------------------------------------------------------------------------------
    async def get_config(self, request: web.Request) -> web.Response:
        return _json(self.state.config.to_json())

    async def post_config(self, request: web.Request) -> web.Response:
        st = self.state
        try:
            changes = await request.json()
            config = st.config.updated(changes)
        except (ValueError, TypeError) as exc:
            return _json({"error": str(exc)}, 400)
        if config.outage == "refuse" and (st.listeners is None or not st.listeners.has_control):
            return _json({"error": REFUSE_NEEDS_CONTROL}, 400)
        st.set_config(config)
        error = await self._apply_outage()
        if error is not None:
            return error
        return _json(st.config.to_json())

    async def _apply_outage(self) -> web.Response | None:
        """Open or close the API listener for ``outage`` before answering, so that the next call sees
        the new state. None, or a 500 when the API port could not be bound again (left ``refuse``)."""
        st = self.state
        if st.listeners is None:
            return None
        try:
            await st.listeners.apply(st.config.outage)
        except OSError as exc:
            st.set_config(st.config.updated({"outage": "refuse"}))
            return _json({"error": f"could not listen on the API port again: {exc}"}, 500)
        return None

    async def get_stats(self, request: web.Request) -> web.Response:
        return _json(self.state.stats())

    async def get_message_debug(self, request: web.Request) -> web.Response:
        message = self.state.messages.get(request.match_info["sid"])
        if message is None:
            return _json({"error": "no such message"}, 404)
        return _json(self.state.debug(message))

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
        error = await self._apply_outage()
        if error is not None:
            return error
        return _json({"reset": True, "config": self.state.config.to_json()})

    async def get_submissions(self, request: web.Request) -> web.StreamResponse:
        """``[[created_unix, sender, segments, to], ...]`` for the stored messages created at or after
        ``since`` (default 0: all), streamed: creates go on between pieces."""
        try:
            since = float(request.query.get("since", "0"))
        except ValueError:
            since = math.nan
        if math.isnan(since):
            return _json({"error": "since must be a number (unix seconds)"}, 400)
        pieces = self.state.submission_chunks(since)
        first = next(pieces)  # fixes the messages listed
        response = web.StreamResponse(headers={"Content-Type": _JSON})
        await response.prepare(request)
        await response.write(first)
        for piece in pieces:
            await response.write(piece)
            await asyncio.sleep(0)
        await response.write_eof()
        return response

    async def health(self, request: web.Request) -> web.Response:
        return _json({"status": "ok", "submissions": len(self.state.all)})


def build_app(state: SandboxState) -> web.Application:
    """The main app: Twilio's API and the control API. Its cleanup closes the status callbacks."""
    handlers = SandboxApp(state)
    app = web.Application(client_max_size=1024 * 1024)
    app["sandbox_state"] = state
    app.on_cleanup.append(state.callbacks.close)
    base = f"/{API_VERSION}/Accounts/{{account_sid}}"
    app.router.add_get(f"{base}.json", handlers.fetch_account, allow_head=False)
    app.router.add_post(f"{base}/Messages.json", handlers.create_message)
    app.router.add_get(f"{base}/Messages.json", handlers.list_messages, allow_head=False)
    app.router.add_get(f"{base}/Messages/{{sid}}.json", handlers.fetch_message, allow_head=False)
    _add_control_routes(app, handlers)
    return app


def build_control_app(state: SandboxState) -> web.Application:
    """The control API alone, for ``--control-port`` (up in every outage mode)."""
    app = web.Application(client_max_size=1024 * 1024)
    app["sandbox_state"] = state
    _add_control_routes(app, SandboxApp(state))
    return app


def _add_control_routes(app: web.Application, handlers: SandboxApp) -> None:
    app.router.add_get("/_sandbox/config", handlers.get_config, allow_head=False)
    app.router.add_post("/_sandbox/config", handlers.post_config)
    app.router.add_get("/_sandbox/stats", handlers.get_stats, allow_head=False)
    app.router.add_get("/_sandbox/messages/{sid}", handlers.get_message_debug, allow_head=False)
    app.router.add_post("/_sandbox/reset", handlers.post_reset)
    app.router.add_post("/_sandbox/callbacks/replay", handlers.post_callbacks_replay)
    app.router.add_get("/_sandbox/health", handlers.health)
    app.router.add_get("/_sandbox/submissions", handlers.get_submissions, allow_head=False)


REFUSE_NEEDS_CONTROL = "outage refuse closes the API port: it needs a separate control port (--control-port)"


class Listeners:
    """The server's sockets: the API listener (Twilio's API and the control API, on ``host:port``) and,
    with ``control_port``, a control-only listener that stays up in every outage mode.

    ``outage=refuse`` closes the API listening socket (the port is released: connects get
    ECONNREFUSED) and closes its idle keep-alive connections (one being answered closes after its
    answer). Leaving it binds the same host and port again. The app, the store and the status
    callbacks (outgoing) are untouched throughout."""

    def __init__(self, state: SandboxState, host: str, port: int, control_port: int | None = None) -> None:
        self.state = state
        self.host = host
        self.port = port
        self.control_port = control_port
        self.api_runner: web.AppRunner | None = None
        self.api_site: web.TCPSite | None = None
        self.control_runner: web.AppRunner | None = None

    @property
    def has_control(self) -> bool:
        return self.control_runner is not None

    async def start(self) -> None:
        self.api_runner = _runner(build_app(self.state))
        await self.api_runner.setup()
        await self._open_api()
        self.port = self.api_site.port  # the port bound (for --port 0), kept for re-opening
        if self.control_port is not None:
            self.control_runner = _runner(build_control_app(self.state))
            await self.control_runner.setup()
            site = _site(self.control_runner, self.host, self.control_port)
            await site.start()
            self.control_port = site.port
        self.state.listeners = self
        await self.apply(self.state.config.outage)

    async def apply(self, outage: str) -> None:
        if outage == "refuse":
            await self._close_api()
        else:
            await self._open_api()

    async def _open_api(self) -> None:
        if self.api_site is None:
            site = _site(self.api_runner, self.host, self.port)
            await site.start()
            self.api_site = site

    async def _close_api(self) -> None:
        site, self.api_site = self.api_site, None
        if site is None:
            return
        await site.stop()  # closes the listening socket: new connections are refused
        for connection in self.api_runner.server.connections:
            if getattr(connection, "_request_in_progress", False):
                connection.close()  # closed once this answer is written (the config call's own, say)
            else:
                # an idle keep-alive connection: closed now. (close() would only cancel its wait for the
                # next request and leave the socket open, unread, in aiohttp 3.14.)
                connection.force_close()

    async def cleanup(self) -> None:
        if self.control_runner is not None:
            await self.control_runner.cleanup()
        if self.api_runner is not None:
            await self.api_runner.cleanup()  # the main app's cleanup closes the status callbacks
        self.state.listeners = None


def _runner(app: web.Application) -> web.AppRunner:
    return web.AppRunner(app, access_log=None, shutdown_timeout=0.5, handle_signals=False)


def _site(runner: web.AppRunner, host: str, port: int) -> web.TCPSite:
    return web.TCPSite(runner, host, port, backlog=2048, reuse_address=True)


# --- entry point -----------------------------------------------------------------------------------
def _env(name: str, default: Any) -> Any:
    value = os.environ.get(name)
    return default if value in (None, "") else value


def _flag_bool(value: Any) -> bool:
    try:
        return as_bool("flag", value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _flag_list(value: Any) -> list[str]:
    try:
        return as_list("flag", value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _flag_port(value: Any) -> int | None:
    if value is None or str(value).strip().lower() in ("", "none"):
        return None
    try:
        return _as_int("port", value, 0, 65535)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _flag_kind(name: str) -> Any:
    if name in _INT_RANGES:
        return int
    if name in _BOOL_KEYS:
        return _flag_bool
    if name in _STR_KEYS or name in _CHOICE_KEYS:
        return str
    if name in _LIST_KEYS:
        return _flag_list
    return float


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    d = SandboxConfig()
    p = argparse.ArgumentParser(
        prog="python -m sandbox", description="Sandbox SMS provider speaking Twilio's API."
    )
    p.add_argument("--host", default=_env("SANDBOX_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(_env("SANDBOX_PORT", 8081)), help="0 = any free port")
    p.add_argument(
        "--control-port",
        type=_flag_port,
        default=_env("SANDBOX_CONTROL_PORT", None),
        help="also serve /_sandbox/ on this port, up in every outage mode; 0 = any free port; default: "
        "none (the control API only on --port) (env SANDBOX_CONTROL_PORT)",
    )
    p.add_argument("--account-sid", default=_env("TWILIO_ACCOUNT_SID", DEFAULT_ACCOUNT_SID))
    p.add_argument("--auth-token", default=_env("TWILIO_AUTH_TOKEN", DEFAULT_AUTH_TOKEN))
    for f in fields(SandboxConfig):
        if f.name == "rules":
            continue
        env = "SANDBOX_" + f.name.upper()
        kind = _flag_kind(f.name)
        p.add_argument(
            "--" + f.name.replace("_", "-"),
            type=kind,
            default=kind(_env(env, getattr(d, f.name))),
            help=f"(env {env})" + (" JSON list or comma-separated" if f.name in _LIST_KEYS else ""),
        )
    p.add_argument("--rules", default=_env("SANDBOX_RULES", "[]"), help="JSON list (env SANDBOX_RULES)")
    p.add_argument("--seed", type=int, default=_env("SANDBOX_SEED", None), help="(env SANDBOX_SEED)")
    p.add_argument("--log-level", default=_env("SANDBOX_LOG_LEVEL", "WARNING"))
    p.add_argument(
        "--state-file",
        default=_env("SANDBOX_STATE_FILE", None),
        help="keep the message store in this file across restarts (sandbox.journal); default: "
        "memory only (env SANDBOX_STATE_FILE)",
    )
    return p.parse_args(argv)


async def serve(
    state: SandboxState, host: str, port: int, stop: asyncio.Event, control_port: int | None = None
) -> None:
    listeners = Listeners(state, host, port, control_port)
    try:
        await listeners.start()
        line = f"sandbox listening on http://{host}:{listeners.port}"
        if listeners.control_port is not None:
            line += f" control http://{host}:{listeners.control_port}"
        print(line, flush=True)  # the first stdout line, once every listener is up
        await stop.wait()
    finally:
        await listeners.cleanup()


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
    if config.outage == "refuse" and args.control_port is None:
        raise SystemExit(f"sandbox: bad configuration: {REFUSE_NEEDS_CONTROL}")
    state = SandboxState(
        account_sid=args.account_sid, auth_token=args.auth_token, config=config, seed=args.seed
    )
    if args.state_file:
        restored = state.journal_open(args.state_file)
        if restored:
            logger.warning("sandbox: %d messages restored from %s", restored, args.state_file)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        state.journal_callbacks()
        await serve(state, args.host, args.port, stop, args.control_port)

    asyncio.run(run())
    return 0
