"""The sandbox's store: ``SandboxState`` holds every message in this process's memory (the process is the
store), the stats and the config, and ``SlidingWindow`` counts the most submissions and segments in any
sliding second per sender and for the account.

A message's lifecycle (``lifecycle.py``) is fixed at create and derived from the clock at every read:
queued | accepted -> (service sends: queued once a sender is assigned) -> sent at its release from the
per-sender and account queues -> delivered | undelivered, or failed without ever being sent.

Must not import Django.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import random
import time
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any

from aiohttp import web

from delivery.providers.twilio.sandbox.callbacks import TwilioCallbackHook
from delivery.providers.twilio.sandbox.config import (
    API_VERSION,
    CALLBACK_SHARE_KEYS,
    DEFAULT_ACCOUNT_SID,
    DEFAULT_AUTH_TOKEN,
    MAX_VALIDITY_PERIOD,
    OUTCOMES,
    SandboxConfig,
)
from delivery.providers.twilio.sandbox.inbound import TwilioInbound
from delivery.providers.twilio.sandbox.lifecycle import (
    INF,
    TRIAL_PREFIX,
    SandboxMessage,
    default_service_sid,
    service_sender,
)
from delivery.providers.twilio.sandbox.paging import Refused
from delivery.providers.twilio.sandbox.responses import twilio_error
from delivery.providers.twilio.sandbox.views import SandboxViews
from sandbox.callbacks import retry_policy_set

AUTH_OK, AUTH_REFUSED, AUTH_OTHER_ACCOUNT = "ok", "refused", "other_account"

if TYPE_CHECKING:
    from sandbox.listeners import Listeners


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


class SandboxState(SandboxViews):
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
        self.callbacks = TwilioCallbackHook(self)
        self.inbound = TwilioInbound(self)  # POST /_sandbox/inbound
        self.journal = None  # a MessageJournal (journal.py) with --state-file
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
        self.inbound.reset()
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
            "inbound": self.inbound.stats(),
        }

    # -- auth ---------------------------------------------------------------------------------------
    def authorized(self, request: web.Request, account_sid: str) -> bool:
        return self.auth_result(request, account_sid) == AUTH_OK

    def signing_token(self) -> str:
        """The primary Auth Token, which signs every callback: the secondary once it is promoted."""
        cfg = self.config
        if cfg.secondary_auth_token_promoted and cfg.secondary_auth_token:
            return cfg.secondary_auth_token
        return self.auth_token

    def account_tokens(self) -> list[str]:
        """The Auth Tokens requests may authenticate with: the primary and the secondary, if any."""
        tokens = [self.signing_token()]
        if self.config.secondary_auth_token and not self.config.secondary_auth_token_promoted:
            tokens.append(self.config.secondary_auth_token)
        return tokens

    def auth_result(self, request: web.Request, account_sid: str) -> str:
        """AUTH_OK; AUTH_REFUSED (401/20003: the credentials are wrong); or AUTH_OTHER_ACCOUNT: valid
        credentials, but the URL names another account, which Twilio answers 404/20404 "The requested
        resource /2010-04-01/Accounts/<sid>/Messages.json was not found" (seen by Twilio's users with a
        wrong or empty account SID in the URL, e.g. demisto/content#28986, twilio-ruby#113)."""
        if self.config.auth_fail:
            return AUTH_REFUSED
        header = request.headers.get("Authorization", "")
        if header != self._expected_auth or self.config.secondary_auth_token_promoted:
            scheme, _, encoded = header.partition(" ")
            if scheme.lower() != "basic":
                return AUTH_REFUSED
            try:
                user, _, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return AUTH_REFUSED
            key_sid, key_secret = self.config.api_key_sid, self.config.api_key_secret
            as_account = hmac.compare_digest(user.encode(), self.account_sid.encode()) and any(
                hmac.compare_digest(password.encode(), token.encode()) for token in self.account_tokens()
            )
            as_key = bool(key_sid and key_secret) and (
                hmac.compare_digest(user.encode(), key_sid.encode())
                and hmac.compare_digest(password.encode(), key_secret.encode())
            )
            if not (as_account or as_key):
                return AUTH_REFUSED
        return AUTH_OK if account_sid == self.account_sid else AUTH_OTHER_ACCOUNT

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
        """Keep the store in ``path`` (``journal.py``): the messages already there are loaded
        (their lifecycles as fixed at their create) and every new one is appended. Returns how many were
        loaded. Call before serving; their owed status callbacks are planned once the loop runs
        (``journal_callbacks``)."""
        from delivery.providers.twilio.sandbox.journal import MessageJournal

        journal = MessageJournal(path)
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
