"""The Twilio sandbox's settings: ``SandboxConfig`` (fault injection and queue settings, set at start and
merged at runtime by ``POST /_sandbox/config``), the parsers that check each key (over the framework's
value checks, ``sandbox.config``), and the constants of Twilio's API the other modules share. Must not
import Django.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field, fields
from typing import Any

from sandbox.callbacks import parse_retry_policy
from sandbox.config import _as_float, _as_int, as_bool, as_list, as_url

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
    "inbound_copies": (1, 100),
}
_BOOL_KEYS = frozenset(
    (
        "callbacks_enabled",
        "callback_shuffle",
        "auth_fail",
        "trial_prefix",
        "default_messaging_service",
        "secondary_auth_token_promoted",
    )
)
_STR_KEYS = frozenset(
    (
        "callback_retry_policy",
        "callback_shared_key_id",
        "callback_shared_key_secret",
        "api_key_sid",
        "api_key_secret",
        "secondary_auth_token",
        "inbound_url",
    )
)
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
    "other_account",  # valid credentials, another account in the URL: 404/20404
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
    # an API key of the account (twilio.com/docs/iam/api-keys): Basic <key sid>:<secret> authenticates too
    api_key_sid: str = ""
    api_key_secret: str = ""
    # An Auth Token rotation (twilio.com/docs/iam/api/secondary_authtoken, .../authtoken): the secondary
    # token authenticates requests as the primary does, and callbacks stay signed with the primary. Once
    # promoted, the secondary is the primary: it signs the callbacks, and the old primary is refused
    # ("all requests to Twilio using your old primary Auth Token will result in an error").
    secondary_auth_token: str = ""
    secondary_auth_token_promoted: bool = False
    opted_out: list[str] = field(default_factory=list)  # recipients who replied STOP (21610)
    trial_prefix: bool = False  # bodies get "Sent from your Twilio trial account - "
    # a send without MessagingServiceSid shows the account's default service in messaging_service_sid
    default_messaging_service: bool = True
    # inbound messages (POST /_sandbox/inbound, inbound.py): the number's "A message comes in" webhook
    # URL (twilio.com/docs/messaging/guides/webhook-request) and the copies of each webhook by default
    inbound_url: str = ""
    inbound_copies: int = 1
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
            elif key == "inbound_url":
                values[key] = as_url(key, value)
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
