"""A sandbox message and its lifecycle, fixed when it is created and read off the clock afterwards.

Twilio's sources for each rule (see docs/twilio.md, the "Fidelity" list):

* Initial status: ``queued`` when ``From`` was given, ``accepted`` for a Messaging Service send without
  one (Twilio docs, "Outbound Message Status in Status Callbacks" and the message-resource status table).
* A service send gets its sender after ``service_assign_delay_ms``: ``from`` is null and ``num_segments``
  is ``"0"`` until then, and the status becomes ``queued`` (twilio-oai spec/json/twilio_api_v2010.json,
  ``num_segments``: "For messages sent via a Messaging Service, num_segments is initially 0, since a
  sender hasn't yet been assigned"; the spec's ``createWithMessagingService`` example has
  ``"from": null``).
* The message leaves the queue at its release time (the per-sender queue, in ``server.py``): status
  ``sent``, ``date_sent`` and ``price`` set then ("The price is populated after the message has been
  sent", twilio-oai ``price``). ``date_sent`` null before that is the sandbox's reading: the spec's
  examples disagree.
* ``callback_gap_ms`` later the final status: ``delivered``, or ``undelivered`` (30003), by the shares.
  A ``failed`` message never shows ``sent`` (Twilio: "If sending is successful: sent, otherwise
  failed"): 30008 at the release time, 30001 (queue overflow) or 21610 (unsubscribed recipient) when a
  service send would get its sender, 30036 (Validity Period Expired) at created + ValidityPeriod.

Nothing here runs on a timer: every read derives the status at "now" from the stored instants, so a
message without a StatusCallback costs nothing after its create.
"""

from __future__ import annotations

import hashlib
import math
import time

from sandbox.gsm7 import _GSM7_BASIC, _GSM7_EXT

# Twilio error titles (twilio.com/docs/api/errors/<code>)
ERROR_MESSAGES = {
    21610: "Attempt to send to unsubscribed recipient",
    21611: "This 'From' number has exceeded the maximum number of queued messages",
    30001: "Queue overflow",
    30003: "Unreachable destination handset",
    30008: "Unknown error",
    30036: "Validity Period Expired",
}
# failures decided when a service send gets its sender: it never reaches "queued"
ASSIGN_FAILURES = frozenset((21610, 30001))
# Twilio: "Sent from your Twilio trial account - " + body (captured API responses; /tmp/twilio_facts.md §9)
TRIAL_PREFIX = "Sent from your Twilio trial account - "
PRICE_PER_SEGMENT = 0.0079  # a US SMS segment; Twilio prices are negative strings, e.g. "-0.00790"
INF = math.inf

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("", "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


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


def dlr_done_date(ts: float) -> str:
    """``RawDlrDoneDate``: ``YYMMDDhhmm`` (Twilio's message-resource doc); UTC here, since Twilio passes the
    carrier's value through and states no zone."""
    return time.strftime("%y%m%d%H%M", time.gmtime(ts))


def service_sender(service_sid: str) -> str:
    """The sender a Messaging Service send is given when it has no ``From``: ``+1500555`` and four digits
    taken from SHA-256 of the service sid, so one service always uses one sender (Twilio picks from the
    service's Sender Pool; the sandbox's pool has one number per service)."""
    digits = int.from_bytes(hashlib.sha256(service_sid.encode()).digest()[:8], "big") % 10_000
    return f"+1500555{digits:04d}"


def default_service_sid(account_sid: str) -> str:
    """The account's default Messaging Service (Twilio's "[Auto-generated] Default Messaging Service",
    one per account): ``MG`` and 32 hex digits of SHA-256 of the account sid, so it is stable across
    restarts and differs between accounts."""
    return "MG" + hashlib.sha256(f"default-service:{account_sid}".encode()).hexdigest()[:32]


def price(segments: int) -> str:
    return f"{-PRICE_PER_SEGMENT * segments:.5f}"


class SandboxMessage:
    """One stored message. Its instants are fixed at create; ``view_at`` says what Twilio shows at a time.

    ``created`` <= ``assign_at`` (sender chosen; = ``created`` when From was given, ``INF`` when it expired
    first) <= ``release_at`` (left the queue; None when refused at assignment) and ``end_at`` (final status,
    ``final_status`` with ``error_code``). It is ``sent`` at ``release_at`` unless ``final_status`` is
    ``failed``.
    """

    __slots__ = (
        "assign_at",
        "body",
        "created",
        "created_ts",
        "end_at",
        "error_code",
        "final_status",
        "from_given",
        "has_callbacks",
        "messaging_service_sid",
        "num_segments",
        "raw_form",
        "release_at",
        "sender",
        "seq",
        "sid",
        "status_callback",
        "to",
        "validity_period",
    )

    def __init__(
        self,
        seq: int,
        sid: str,
        to: str,
        sender: str,
        from_given: bool,
        body: str,
        messaging_service_sid: str,
        created: float,
        status_callback: str,
    ) -> None:
        self.seq = seq
        self.sid = sid
        self.to = to
        self.sender = sender  # the From given, or the service's sender (shown from assign_at on)
        self.from_given = from_given
        self.body = body
        self.messaging_service_sid = messaging_service_sid
        self.created = created
        self.created_ts = int(created)  # whole seconds (RFC 2822 precision); never decreases with seq
        self.status_callback = status_callback
        self.num_segments = count_segments(body)
        self.assign_at = created
        self.release_at: float | None = created
        self.end_at = created
        self.final_status = "delivered"
        self.error_code: int | None = None
        self.validity_period = 36000
        self.raw_form = b""
        self.has_callbacks = False

    # -- derived ------------------------------------------------------------------------------------
    @property
    def initial_status(self) -> str:
        return "queued" if self.from_given else "accepted"

    @property
    def sent(self) -> bool:
        """Whether it leaves the queue at all (a failed message never shows ``sent``)."""
        return self.final_status != "failed"

    def status_at(self, now: float) -> tuple[str, float]:
        """(status, since when) at ``now``."""
        if now >= self.end_at:
            return self.final_status, self.end_at
        if self.final_status != "failed" and now >= self.release_at:
            return "sent", self.release_at
        if now >= self.assign_at and not self.from_given:
            return "queued", self.assign_at
        return self.initial_status, self.created

    def from_at(self, now: float) -> str | None:
        return self.sender if self.from_given or now >= self.assign_at else None

    def sent_second(self, now: float) -> int | None:
        """``date_sent`` (whole seconds) at ``now``, or None while unsent."""
        if self.final_status != "failed" and now >= self.release_at:
            return int(self.release_at)
        return None

    def timeline(self) -> list[tuple[str, float]]:
        """The status changes after creation, in order: what Twilio sends status callbacks for (none for
        the initial status; ``queued`` when a service send gets its sender; then ``sent`` and the final
        status, or ``failed`` alone)."""
        events: list[tuple[str, float]] = []
        if self.error_code in ASSIGN_FAILURES:
            return [("failed", self.end_at)]
        if not self.from_given and self.assign_at != INF:
            events.append(("queued", self.assign_at))
        if self.final_status == "failed":
            events.append(("failed", self.end_at))
        else:
            events.append(("sent", self.release_at))
            events.append((self.final_status, self.end_at))
        return events
