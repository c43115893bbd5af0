"""The Vonage sandbox's settings (``VonageConfig``: set at start, merged at runtime by
``POST /_sandbox/config``) and the constants of Vonage's SMS API it answers with. Must not import Django.

Sources (see docs/vonage.md, "Fidelity"):

* Statuses of ``POST /sms/json`` (HTTP 200, one entry per part, ``status`` "0" = accepted) and their
  meanings: developer.vonage.com/api-errors/sms and developer.vonage.com/messaging/sms/guides/
  troubleshooting-sms. ``error-text`` wordings are the sandbox's own, after those titles.
* Receipt statuses: developer.vonage.com/messaging/sms/guides/delivery-receipts; ``err-code``: Vonage
  support article 204014733 (api.support.vonage.com, "Nexmo SMS Delivery Error Codes").
* Signature methods ("MD5 hash" by default; MD5, SHA1, SHA-256 and SHA-512 HMAC):
  developer.vonage.com/getting-started/concepts/signing-messages.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, fields
from typing import Any

from sandbox.callbacks import parse_retry_policy
from sandbox.config import _as_float, _as_int, as_bool, as_list, as_url

DEFAULT_API_KEY = "abcd1234"  # Vonage api_key: 8 characters (developer.vonage.com/en/api/sms, api_key)
DEFAULT_API_SECRET = "sandbox-api-secret"
# Vonage's SMS API status codes (developer.vonage.com/api-errors/sms): the sandbox's error-text for each
STATUS_TEXT = {
    1: "Throttled",
    2: "Missing Parameters",
    3: "Invalid Parameters",
    4: "Bad Credentials",
    5: "Internal Error",
    6: "Invalid Message",
    7: "Number Barred",
    8: "Partner Account Barred",
    9: "Partner Quota Violation",
    10: "Too Many Existing Binds",
    11: "Account Not Enabled For HTTP",
    12: "Message Too Long",
    14: "Invalid Signature",
    15: "Invalid Sender Address",
    16: "Invalid TTL",
    19: "Facility Not Allowed",
    20: "Invalid Message Class",
    22: "Invalid Network Code",
    23: "Bad Callback :: Missing Protocol",
    29: "Non-Whitelisted Destination",
    32: "Signature And API Secret Disallowed",
    33: "Number De-activated",
}
# Receipt statuses (developer.vonage.com/messaging/sms/guides/delivery-receipts, "DLR status messages")
RECEIPT_STATUSES = ("delivered", "expired", "failed", "rejected", "accepted", "buffered", "unknown")
# shares of parts ending in each non-delivered final status (the rest: delivered, err-code 0)
RECEIPT_SHARE_KEYS = (
    "receipt_expired_share",
    "receipt_failed_share",
    "receipt_rejected_share",
    "receipt_unknown_share",
)
RATE_KEYS = (
    "throttled_rate",  # status 1
    "internal_error_rate",  # status 5
    "invalid_credentials_rate",  # status 4
    "insufficient_credit_rate",  # status 9
    "error_rate_5xx",  # HTTP 500 or 503, nothing stored
    "timeout_rate",  # nothing stored, hang, then HTTP 503
    "accept_then_hang_rate",  # stored, hang, then the normal answer
    "store_then_500_rate",
    "store_then_503_rate",
    "store_then_drop_rate",
)
RULE_ACTIONS = (
    "status",  # answer this Vonage status (rule "status": N), nothing stored
    "500",
    "503",
    "timeout",
    "accept_then_hang",
    "store_then_500",
    "store_then_503",
    "store_then_drop",
)
STORED_ACTIONS = frozenset(("accept_then_hang", "store_then_500", "store_then_503", "store_then_drop"))
OUTAGE_MODES = ("none", "503", "refuse")
SIGNATURE_METHODS = ("md5hash", "md5", "sha1", "sha256", "sha512")
RECEIPT_METHODS = ("POST-JSON", "POST", "GET")
OUTCOMES = (
    "accepted",
    "rejected",  # answered with a non-zero status, nothing stored
    "error_500",
    "error_503",
    "timeout",
    "accept_then_hang",
    "store_then_500",
    "store_then_503",
    "store_then_drop",
    "outage_503",
)

_UNIT_KEYS = frozenset((*RATE_KEYS, *RECEIPT_SHARE_KEYS, "callback_drop_rate", "callback_early_rate"))
_INT_RANGES = {
    "callback_repeat": (1, 100),
    "callback_retries": (0, 10),
    "receipt_failed_err_code": (0, 99),
    "receipt_expired_err_code": (0, 99),
    "receipt_rejected_err_code": (0, 99),
    "receipt_unknown_err_code": (0, 99),
    "inbound_copies": (1, 100),
}
_BOOL_KEYS = frozenset(
    ("callbacks_enabled", "callback_shuffle", "auth_fail", "account_barred", "require_signature")
)
_STR_KEYS = frozenset(("callback_retry_policy", "receipt_url", "signature_secret", "inbound_url"))
_LIST_KEYS = frozenset(("barred", "whitelist"))
_CHOICE_KEYS = {
    "receipt_intermediate": ("", "accepted", "buffered"),
    "outage": OUTAGE_MODES,
    "signature_method": SIGNATURE_METHODS,
    "receipt_method": RECEIPT_METHODS,
}
_UNBOUNDED = frozenset(("balance",))


@dataclass
class VonageConfig:
    """Fault injection and the account's settings. Rates are shares of requests (0..1, summing to at most
    1); rules come first."""

    latency_ms: float = 0.0  # added to every send (asyncio.sleep, non-blocking)
    throttled_rate: float = 0.0
    internal_error_rate: float = 0.0
    invalid_credentials_rate: float = 0.0
    insufficient_credit_rate: float = 0.0
    error_rate_5xx: float = 0.0
    timeout_rate: float = 0.0
    timeout_hang_seconds: float = 30.0
    accept_then_hang_rate: float = 0.0
    store_then_500_rate: float = 0.0
    store_then_503_rate: float = 0.0
    store_then_drop_rate: float = 0.0
    # [{"to": "4477...", "action": one of RULE_ACTIONS, "times": N | None, "status": int (status only)}],
    # matched by the recipient as sent, without a leading "+"
    rules: list[dict] = field(default_factory=list)
    outage: str = "none"  # "503": every API call answers HTTP 503; "refuse": the API port is closed
    auth_fail: bool = False  # every send answers status 4
    account_barred: bool = False  # every send answers status 8 (the account is suspended)
    barred: list[str] = field(default_factory=list)  # recipients answered status 7
    # a trial account's test numbers: when not empty, any other recipient is answered status 29
    whitelist: list[str] = field(default_factory=list)
    balance: float = 1000.0  # EUR; each part costs price_per_part; short of it: status 9
    price_per_part: float = 0.0333
    # the account's signature settings (Vonage dashboard): with a secret, requests may be signed (sig),
    # receipts are signed; require_signature refuses api_secret authentication (status 32)
    signature_secret: str = ""
    signature_method: str = "md5hash"
    require_signature: bool = False
    # the account's default receipt webhook (a request's "callback" overrides it) and its method
    receipt_url: str = ""
    receipt_method: str = "POST-JSON"
    # receipts (one per part)
    callbacks_enabled: bool = True
    # "accepted" or "buffered": an intermediate receipt per part before its final one (Vonage support
    # article 115007053127, "Intermediate DLR"); "" (default): final receipts only
    receipt_intermediate: str = ""
    callback_delay_ms: float = 500.0  # the final status -> its receipt POST
    callback_gap_ms: float = 100.0  # submit -> the part's final status (its scts)
    receipt_expired_share: float = 0.0
    receipt_failed_share: float = 0.0
    receipt_rejected_share: float = 0.0
    receipt_unknown_share: float = 0.0
    # err-code of each non-delivered status (Vonage support article 204014733, "Nexmo SMS Delivery Error
    # Codes": 1 Unknown, 6 Anti-Spam Rejection, 8 Network Error, ...)
    receipt_expired_err_code: int = 1  # Unknown
    receipt_failed_err_code: int = 8  # Network Error
    receipt_rejected_err_code: int = 6  # Anti-Spam Rejection
    receipt_unknown_err_code: int = 1  # Unknown
    callback_repeat: int = 1
    callback_shuffle: bool = False  # a message's receipts (its parts') in random order
    callback_drop_rate: float = 0.0
    callback_early_rate: float = 0.0  # the first receipt is POSTed before the send is answered
    callback_timeout_ms: float = 5000.0
    callback_retries: int = 1
    callback_retry_policy: str = "ct"
    callback_total_timeout_ms: float = 15000.0
    callback_retry_backoff_ms: float = 100.0
    # inbound messages (POST /_sandbox/inbound, inbound.py): the account's inbound SMS webhook (Vonage
    # dashboard, API settings) and the copies of each webhook by default. Vonage resends a webhook not
    # answered 200 or 204 "for the next 24 hours" (developer.vonage.com/messaging/sms/guides/
    # inbound-sms); it documents no spacing: the sandbox waits inbound_retry_backoff_ms, doubled each
    # time up to inbound_retry_max_backoff_ms, for inbound_retry_window_seconds (tests shrink all three)
    inbound_url: str = ""
    inbound_copies: int = 1
    inbound_retry_backoff_ms: float = 1000.0
    inbound_retry_max_backoff_ms: float = 900_000.0
    inbound_retry_window_seconds: float = 86400.0

    def to_json(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["rules"] = copy.deepcopy(self.rules)
        for key in _LIST_KEYS:
            data[key] = list(data[key])
        return data

    def updated(self, changes: dict) -> VonageConfig:
        """A validated copy with ``changes`` applied; raises ValueError on a bad key or value."""
        if not isinstance(changes, dict):
            raise ValueError("config must be a JSON object")
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise ValueError(f"unknown config keys: {', '.join(unknown)}")
        values = {**self.to_json(), **changes}
        for key, value in values.items():
            values[key] = _check(key, value)
        for group, what in ((RATE_KEYS, "rates"), (RECEIPT_SHARE_KEYS, "receipt shares")):
            if sum(values[k] for k in group) > 1.0 + 1e-9:
                raise ValueError(f"the {what} ({', '.join(group)}) must sum to at most 1")
        return VonageConfig(**values)

    @property
    def any_rate(self) -> bool:
        return any(getattr(self, k) for k in RATE_KEYS)


def _check(key: str, value: Any) -> Any:
    if key == "rules":
        return _validate_rules(value)
    if key in _INT_RANGES:
        return _as_int(key, value, *_INT_RANGES[key])
    if key in _BOOL_KEYS:
        return as_bool(key, value)
    if key == "callback_retry_policy":
        return parse_retry_policy(value)
    if key == "inbound_url":
        return as_url(key, value)
    if key in _STR_KEYS:
        if not isinstance(value, str):
            raise ValueError(f"{key} must be a string")
        return value
    if key in _LIST_KEYS:
        return [item.lstrip("+") for item in as_list(key, value)]
    if key in _CHOICE_KEYS:
        if value not in _CHOICE_KEYS[key]:
            raise ValueError(f"{key} must be one of {', '.join(_CHOICE_KEYS[key])}")
        return value
    return _as_float(key, value, 0.0, 1.0 if key in _UNIT_KEYS else math.inf)


def _validate_rules(rules: Any) -> list[dict]:
    if not isinstance(rules, list):
        raise ValueError("rules must be a list")
    out = []
    for rule in rules:
        if not isinstance(rule, dict):
            raise ValueError("each rule must be an object")
        extra = set(rule) - {"to", "action", "times", "status"}
        if extra:
            raise ValueError(f"unknown rule keys: {', '.join(sorted(extra))}")
        to = rule.get("to")
        if not isinstance(to, str) or not to.lstrip("+"):
            raise ValueError("rule.to must be a non-empty string")
        action = str(rule.get("action", ""))
        if action not in RULE_ACTIONS:
            raise ValueError(f"rule.action must be one of {', '.join(RULE_ACTIONS)}")
        times = rule.get("times")
        clean: dict[str, Any] = {
            "to": to.lstrip("+"),
            "action": action,
            "times": None if times is None else _as_int("rule.times", times),
        }
        if action == "status":
            status = _as_int("rule.status", rule.get("status", -1) if "status" in rule else "x")
            if status == 0 or status not in STATUS_TEXT:
                raise ValueError(f"rule.status must be one of {', '.join(map(str, STATUS_TEXT))}")
            clean["status"] = status
        out.append(clean)
    return out
