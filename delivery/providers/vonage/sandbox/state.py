"""The Vonage sandbox's store: ``VonageState`` holds every accepted part in this process's memory, the
account (credentials, balance, signature settings), the counters and the config. Must not import Django.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import random
import time
from typing import TYPE_CHECKING, Any

from delivery.providers.vonage.sandbox.config import (
    DEFAULT_API_KEY,
    DEFAULT_API_SECRET,
    OUTCOMES,
    RECEIPT_SHARE_KEYS,
    STATUS_TEXT,
    VonageConfig,
)
from delivery.providers.vonage.sandbox.inbound import VonageInbound
from delivery.providers.vonage.sandbox.journal import PartJournal
from delivery.providers.vonage.sandbox.parts import (
    VonagePart,
    VonageRequest,
    new_message_id,
    signature,
    split_parts,
)
from delivery.providers.vonage.sandbox.receipts import ReceiptHook
from sandbox.callbacks import retry_policy_set

if TYPE_CHECKING:
    from sandbox.listeners import Listeners

# The recipient's network (MCC+MNC) by country calling code, for "network" and "network-code"; the
# sandbox's own table (Vonage answers "the estimated ID of the network of the recipient")
NETWORKS = {"44": "23410", "1": "310260", "49": "26201", "33": "20801", "34": "21401", "39": "22201"}


def network_of(msisdn: str) -> str:
    for prefix in (msisdn[:2], msisdn[:1]):
        if prefix in NETWORKS:
            return NETWORKS[prefix]
    return ""


class VonageState:
    def __init__(
        self,
        *,
        api_key: str = DEFAULT_API_KEY,
        api_secret: str = DEFAULT_API_SECRET,
        config: VonageConfig | None = None,
        seed: int | None = None,
        clock: Any = time.time,
    ) -> None:
        self.api_key = api_key
        self.api_secret = api_secret
        self.clock = clock
        self.started = clock()
        self.start_config = (config or VonageConfig()).updated({})
        self.seed = seed
        self.callbacks = ReceiptHook(self)
        self.inbound = VonageInbound(self)  # POST /_sandbox/inbound
        self.listeners: Listeners | None = None
        self.journal: PartJournal | None = None  # with --state-file
        self._restored: list[VonagePart] = []
        self.reset()

    def reset(self) -> None:
        self.messages: dict[str, VonagePart] = {}  # by message-id
        self.all: list[VonagePart] = []
        self.requests = 0  # sends stored (a long message counts once)
        self._next_seq = 0
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self.rejections: dict[int, int] = {}  # sends answered with a non-zero status, by status
        self.in_flight: int = getattr(self, "in_flight", 0)
        self.max_in_flight = self.in_flight
        self.rng = random.Random(self.seed)
        self.set_config(self.start_config.updated({}))
        self.balance = self.config.balance
        self.callbacks.reset()
        self.inbound.reset()
        if getattr(self, "journal", None) is not None:
            self.journal.truncate()  # a reset forgets the store, on disk too

    def set_config(self, config: VonageConfig) -> None:
        old = getattr(self, "config", None)
        self.config = config
        rules_by_to: dict[str, list[dict]] = {}
        for rule in config.rules:
            rules_by_to.setdefault(rule["to"], []).append(rule)
        self.rules_by_to = rules_by_to
        self.barred = frozenset(config.barred)
        self.whitelist = frozenset(config.whitelist)
        self.any_share = any(getattr(config, k) for k in RECEIPT_SHARE_KEYS)
        self.retry_policy = retry_policy_set(config.callback_retry_policy)
        self.api_down = config.outage != "none"
        if old is not None and old.balance != config.balance:
            self.balance = config.balance  # a top-up (or a drain) through the config

    # -- answers ------------------------------------------------------------------------------------
    def reject(self, status: int, to: str = "") -> dict:
        """Vonage's answer for a refused send: HTTP 200, one entry with the status and its error-text."""
        self.rejections[status] = self.rejections.get(status, 0) + 1
        entry = {"status": str(status), "error-text": STATUS_TEXT[status]}
        if to:
            entry = {"to": to, **entry}
        return {"message-count": "1", "messages": [entry]}

    # -- auth ---------------------------------------------------------------------------------------
    def auth_status(self, params: dict[str, str], authorization: str) -> int:
        """0 when the request may go on; else the Vonage status to answer. A request authenticates with
        api_key + api_secret (form, JSON or query), with an ``Authorization: Basic`` header (what the
        official SDK sends), or, signed, with api_key + timestamp + sig (never with a secret as well)."""
        cfg = self.config
        if cfg.auth_fail:
            return 4
        key, secret, sig = params.get("api_key", ""), params.get("api_secret", ""), params.get("sig", "")
        if not secret and authorization[:6].lower() == "basic ":
            try:
                user, _, password = (
                    base64.b64decode(authorization[6:].strip(), validate=True).decode().partition(":")
                )
            except (binascii.Error, UnicodeDecodeError):
                return 4
            key, secret = key or user, password
        if not key:
            return 2
        if not hmac.compare_digest(key.encode(), self.api_key.encode()):
            return 4
        if sig:
            if secret:
                return 32  # "Signature And API Secret Disallowed"
            if not cfg.signature_secret:
                return 14
            expected = signature(params, cfg.signature_secret, cfg.signature_method)
            return 0 if hmac.compare_digest(sig.lower().encode(), expected.lower().encode()) else 14
        if not secret:
            return 2
        if not hmac.compare_digest(secret.encode(), self.api_secret.encode()):
            return 4
        return 14 if cfg.require_signature else 0

    # -- faults -------------------------------------------------------------------------------------
    def pick_fault(self, to: str) -> tuple[str, dict | None] | None:
        """The injected outcome for a send to ``to``: (action, rule) or None to go on normally."""
        for rule in self.rules_by_to.get(to, ()):
            times = rule["times"]
            if times is None or times > 0:
                if times is not None:
                    rule["times"] = times - 1
                return rule["action"], rule
        cfg = self.config
        if not cfg.any_rate:
            return None
        x = self.rng.random()
        for key, action in (
            ("throttled_rate", "status:1"),
            ("internal_error_rate", "status:5"),
            ("invalid_credentials_rate", "status:4"),
            ("insufficient_credit_rate", "status:9"),
            ("error_rate_5xx", "5xx"),
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
                if action.startswith("status:"):
                    return "status", {"status": int(action[7:])}
                return action, None
            x -= rate
        return None

    # -- store --------------------------------------------------------------------------------------
    def cost(self, text: str, unicode: bool) -> tuple[list[str], float]:
        parts = split_parts(text, unicode)
        return parts, len(parts) * self.config.price_per_part

    def store(self, params: dict[str, str], to: str, texts: list[str], callback: str) -> VonageRequest:
        """Store one part per text, charge the balance, fix each part's outcome and plan its receipt."""
        cfg = self.config
        now = self.clock()
        request_id = new_message_id()
        network = network_of(to)
        form = {k: v for k, v in params.items() if k not in ("api_secret",)}
        parts = []
        for index, text in enumerate(texts, 1):
            part = VonagePart(self._next_seq, new_message_id(), to, params.get("from", ""), text, now)
            self._next_seq += 1
            part.unicode = params.get("type") == "unicode"
            part.client_ref = params.get("client-ref", "")
            part.account_ref = params.get("account-ref", "")
            part.status_callback = callback
            part.index, part.parts, part.request_id = index, len(texts), request_id
            part.network = network
            part.price = cfg.price_per_part
            part.form = form
            self.balance -= part.price
            self._decide_final(part, now)
            self.messages[part.sid] = part
            self.all.append(part)
            parts.append(part)
        self.requests += 1
        request = VonageRequest(parts, cfg.receipt_intermediate)
        if callback:
            self.callbacks.message_accepted(request)  # marks it has_callbacks when receipts are planned
            for part in parts:
                part.has_callbacks = request.has_callbacks
        if self.journal is not None:
            for part in parts:
                self.journal.append(part)  # before the send is answered
        return request

    def journal_open(self, path: str) -> int:
        """Keep the store in ``path``: the parts already there are loaded (and charged to the balance),
        every new one is appended. Returns how many were loaded; their owed receipts are planned once
        the loop runs (``journal_callbacks``)."""
        journal = PartJournal(path)
        restored = journal.load() if os.path.getsize(path) else []
        for part in restored:
            self.messages[part.sid] = part
            self.all.append(part)
            self.balance -= part.price
        self.requests += len({part.request_id for part in restored})
        if restored:
            self._next_seq = max(part.seq for part in restored) + 1
        self.journal = journal
        self._restored = restored
        return len(restored)

    def journal_callbacks(self) -> int:
        """Plan the receipts the restored parts are still owed (``StatusCallbackHook.message_restored``:
        those due in its window are sent again now); on the running loop."""
        by_request: dict[str, list[VonagePart]] = {}
        for part in self._restored:
            if part.has_callbacks:
                by_request.setdefault(part.request_id, []).append(part)
        self._restored = []
        return sum(self.callbacks.message_restored(VonageRequest(parts)) for parts in by_request.values())

    def _decide_final(self, part: VonagePart, now: float) -> None:
        cfg = self.config
        part.end_at = now + cfg.callback_gap_ms / 1000.0
        if not self.any_share:
            return
        x = self.rng.random()
        for key in RECEIPT_SHARE_KEYS:
            share = getattr(cfg, key)
            if x < share:
                status = key.removeprefix("receipt_").removesuffix("_share")
                part.final_status = status
                part.err_code = getattr(cfg, f"receipt_{status}_err_code")
                return
            x -= share

    def render(self, part: VonagePart, balance: float) -> dict:
        """One ``messages[]`` entry of an accepted send (developer.vonage.com/en/api/sms, "Send an SMS",
        200 response; SDK vonage_sms.responses.MessageResponse)."""
        entry = {
            "to": part.to,
            "message-id": part.sid,
            "status": "0",
            "remaining-balance": f"{balance:.8f}",
            "message-price": f"{part.price:.8f}",
            "network": part.network,
        }
        if part.client_ref:
            entry["client-ref"] = part.client_ref
        if part.account_ref:
            entry["account-ref"] = part.account_ref
        return entry

    def answer(self, parts: list[VonagePart]) -> dict:
        balance = self.balance + sum(p.price for p in parts)
        messages = []
        for part in parts:
            balance -= part.price
            messages.append(self.render(part, balance))
        return {"message-count": str(len(parts)), "messages": messages}

    # -- views --------------------------------------------------------------------------------------
    def debug(self, part: VonagePart) -> dict:
        now = self.clock()
        return {
            "message-id": part.sid,
            "seq": part.seq,
            "to": part.to,
            "from": part.sender,
            "text": part.text,
            "type": "unicode" if part.unicode else "text",
            "client-ref": part.client_ref or None,
            "part": part.index,
            "parts": part.parts,
            "request_id": part.request_id,
            "network": part.network,
            "price": part.price,
            "callback": part.status_callback or None,
            "status": part.status_at(now),
            "final_status": part.final_status,
            "err-code": part.err_code,
            "created_at": part.created,
            "final_at": part.end_at,
            "form": part.form,
            "receipts": part.has_callbacks,
            "now": now,
        }

    def list_parts(self, to: str | None = None, client_ref: str | None = None) -> list[dict]:
        return [
            self.debug(p)
            for p in self.all
            if (to is None or p.to == to.lstrip("+")) and (client_ref is None or p.client_ref == client_ref)
        ]

    def stats(self) -> dict:
        now = self.clock()
        by_status: dict[str, int] = {}
        for part in self.all:
            status = part.status_at(now)
            by_status[status] = by_status.get(status, 0) + 1
        return {
            "submissions": self.requests,
            "parts": len(self.all),
            "by_outcome": dict(self.outcomes),
            "rejections": {str(code): n for code, n in sorted(self.rejections.items())},
            "by_status": by_status,
            "balance": round(self.balance, 8),
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "callbacks": self.callbacks.stats(),
            "callback_results": self.callbacks.results_stats(),
            "inbound": self.inbound.stats(),
        }
