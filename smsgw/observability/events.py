"""Event figures (what happened: sends, latencies, rejections), counted where they happen.

They use prometheus-client's multiprocess mode: each process (gunicorn worker, Celery prefork child)
writes its own memory-mapped files in PROMETHEUS_MULTIPROC_DIR (settings: SMSGW_VAR_DIR/metrics unless
set), and a scrape merges every file of the host, so a counter is the sum over all processes, dead ones
included (a counter never goes backwards when a worker child is recycled). The directory is per host:
a host that runs only workers exposes its files with ``manage.py metrics_serve``.

Figures that describe state (how many messages wait, how old the oldest is) are not here: they are read
from the database at scrape time (reporting.state), the same answer from whichever host.

Recording never raises into the code that sends: a metrics failure costs a figure, not a message.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Container
from datetime import datetime

from prometheus_client import Counter, Histogram

log = logging.getLogger(__name__)

# Seconds: sub-second for a healthy gateway, up to an hour for a backlog or an outage.
LAG_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, float("inf"))
PROVIDER_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, float("inf"))
# Seconds an API request takes, from the first middleware in to the answer out.
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, float("inf"))
SWEEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, float("inf"))

SWEEP_SECONDS = Histogram(
    "smsgw_sweep_duration_seconds", "Duration of one sweep pass.", buckets=SWEEP_BUCKETS
)
SWEEP_ROWS = Counter("smsgw_sweep_rows", "Rows a sweep pass moved on, by what it did with them.", ["outcome"])
SWEEP_QUEUED = Counter("smsgw_sweep_queued", "Messages the sweep handed to the send queues.", ["priority"])
SCHEDULE_LAG = Histogram(
    "smsgw_schedule_lag_seconds",
    "sent_at - due_at of each message accepted by the provider (retries included).",
    ["priority"],
    buckets=LAG_BUCKETS,
)
SENT = Counter("smsgw_messages_sent", "Messages accepted by the provider, by priority class.", ["priority"])
SEGMENTS_SENT = Counter(
    "smsgw_segments_sent",
    "Segments (the provider's unit of work and of price) of the messages the provider accepted, by provider.",
    ["provider"],
)
DELIVERED = Counter(
    "smsgw_messages_delivered", "Messages a provider receipt moved to delivered, by provider.", ["provider"]
)
UNDELIVERED = Counter(
    "smsgw_messages_undelivered",
    "Messages a provider receipt moved to undelivered, by provider.",
    ["provider"],
)
DUE_TO_DELIVERED = Histogram(
    "smsgw_due_to_delivered_seconds",
    "delivered_at (the carrier's time when trusted, else the receipt's arrival) - due_at of each message a "
    "receipt moved to delivered, by provider.",
    ["provider"],
    buckets=LAG_BUCKETS,
)
PROVIDER_SECONDS = Histogram(
    "smsgw_provider_request_duration_seconds",
    "Duration of one provider submit request.",
    ["provider"],
    buckets=PROVIDER_BUCKETS,
)
PROVIDER_REQUESTS = Counter(
    "smsgw_provider_requests",
    "Provider submit requests by outcome and code (the provider's error code, else the HTTP status).",
    ["provider", "outcome", "code"],
)
RETRIES = Counter(
    "smsgw_send_retries", "Messages put back to be sent again after a provider answer, by reason.", ["reason"]
)
DEAD_LETTERS = Counter(
    "smsgw_dead_letters", "Messages the send worker ended failed (dead letters), by reason.", ["reason"]
)
WEBHOOKS = Counter("smsgw_webhook_attempts", "Tenant webhook delivery attempts, by result.", ["result"])
QUOTA_REJECTIONS = Counter(
    "smsgw_quota_rejections", "Requests or due messages refused by a tenant quota.", ["quota"]
)
SUPPRESSION_CHANGES = Counter(
    "smsgw_suppression_changes",
    "Suppression list changes (added, removed, help), by source: inbound_keyword, provider_error, api, "
    "operator.",
    ["action", "source"],
)
OPTED_OUT_STOPPED = Counter(
    "smsgw_opted_out_stopped",
    "Messages stopped by the suppression list: refused at acceptance, or cancelled before submission.",
    ["stage"],
)
RATE_LIMIT_REJECTIONS = Counter(
    "smsgw_rate_limit_rejections", "API requests refused by the per-key rate limit (429)."
)
BROKER_DISCARDED = Counter(
    "smsgw_broker_discarded",
    "Broker messages set aside without running, by queue and reason: empty, not_json, not_a_message (the "
    "transport could not read them: smsgw.runtime.transports), unknown_task, undecodable, invalid "
    "(Celery could not run them: smsgw.worker).",
    ["queue", "reason"],
)

# Every HTTP request the web answers (the tenant API, the Twilio-compatible API, provider callbacks, the
# admin, health). The route is the URL pattern (``v1/messages/<str:public_id>``), never the path: the label
# set is bounded by the URL configuration, whatever clients send (smsgw.http.request_metrics).
HTTP_SECONDS = Histogram(
    "smsgw_http_request_duration_seconds",
    "Duration of HTTP requests by route (the URL pattern; admin/ for the whole admin, unmatched for a "
    "path no pattern matches), method and status class (2xx, 4xx, ...). Its _count is the request rate.",
    ["route", "method", "status_class"],
    buckets=HTTP_BUCKETS,
)
CALLBACKS = Counter(
    "smsgw_callbacks_received",
    "Provider callbacks received (kind receipt: status callbacks, inbound: incoming messages), by provider "
    "and outcome: stored, duplicate (a receipt already stored), refused (signature, timestamp or replay: "
    "403), invalid (other 4xx), unavailable (503: neither the database nor the spool took it), error.",
    ["kind", "provider", "outcome"],
)
CANCEL_RACES = Counter(
    "smsgw_cancellation_races",
    "Cancellation races (SPEC section 4: exactly one side wins), by side: cancel_lost (a cancel request "
    "refused because a send had claimed the message), send_found_cancelled (a send task whose message "
    "was cancelled after it was queued: the claim took nothing).",
    ["side"],
)
CLAIM_FAILURES = Counter(
    "smsgw_claim_failures",
    "Claims that raised instead of taking their batch (the sweep's pass, the send worker's claim), by stage "
    "and exception class. The task is retried by its next tick; a steady rate means the database refuses.",
    ["stage", "error"],
)

CALLBACKS_KEY_UNKNOWN = Counter(
    "smsgw_callbacks_key_unknown",
    "Provider callbacks signed with a key id this host does not hold, answered 503 (a configuration "
    "fault: their messages are looked up instead), by provider.",
    ["provider"],
)

# Two-way messaging (inbound): what recipients sent back.
INBOUND_RECEIVED = Counter(
    "smsgw_inbound_received",
    "Inbound messages (and parts of long ones) whose provider webhook was verified, by provider and "
    "whether it was new or a duplicate the store dropped (a provider's retry).",
    ["provider", "result"],
)
INBOUND_ACTIONS = Counter(
    "smsgw_inbound_keyword_actions",
    "Keyword actions an inbound message took (opt_out, opt_in, help, cancel, confirm) and near misses "
    "left for review (review).",
    ["action"],
)
INBOUND_DELAY = Histogram(
    "smsgw_inbound_to_tenant_seconds",
    "From an inbound message's webhook reaching us to its message.received webhook answered 2xx by the "
    "tenant.",
    buckets=LAG_BUCKETS,
)


def _safe(fn):
    def wrapper(*args, **kwargs):
        try:
            fn(*args, **kwargs)
        except Exception:
            log.exception("metrics: recording %s failed", fn.__name__)

    return wrapper


@_safe
def sweep_pass(report) -> None:
    SWEEP_SECONDS.observe(report.seconds)
    for outcome in ("expired", "republished", "leases_expired", "quiet_deferred", "paced", "unavailable"):
        n = getattr(report, outcome)
        if n:
            SWEEP_ROWS.labels(outcome).inc(n)
    for priority, n in report.queued.items():
        if n:
            SWEEP_ROWS.labels("queued").inc(n)
            SWEEP_QUEUED.labels(str(priority)).inc(n)


@_safe
def provider_answers(provider: str, results) -> None:
    for res in results:
        PROVIDER_SECONDS.labels(provider).observe(max(0.0, (res.latency_ms or 0.0) / 1000.0))
        code = str(res.error_code or res.http_status or "none")[:16]
        PROVIDER_REQUESTS.labels(provider, str(getattr(res.outcome, "value", res.outcome)), code).inc()


@_safe
def messages_sent(rows, now: datetime, *, provider: str = "unknown") -> None:
    for row in rows:
        priority = str(row.get("priority") or "unknown")
        SENT.labels(priority).inc()
        SEGMENTS_SENT.labels(provider).inc(int(row.get("segments") or 1))
        if row.get("due_at") is not None:
            SCHEDULE_LAG.labels(priority).observe(max(0.0, (now - row["due_at"]).total_seconds()))


@_safe
def send_moves(counts: dict[str, int], dead: dict[str, int]) -> None:
    for reason, n in counts.items():
        RETRIES.labels(reason).inc(n)
    for reason, n in dead.items():
        DEAD_LETTERS.labels(reason).inc(n)


@_safe
def receipts_final(finals) -> None:
    """``finals``: (provider, status, due_at, delivered_at) of each message a receipt moved to a final
    delivery status (delivered, undelivered), after the move committed."""
    for provider, status, due_at, stamped_at in finals:
        if status == "delivered":
            DELIVERED.labels(provider).inc()
            if due_at is not None and stamped_at is not None:
                DUE_TO_DELIVERED.labels(provider).observe(max(0.0, (stamped_at - due_at).total_seconds()))
        elif status == "undelivered":
            UNDELIVERED.labels(provider).inc()


@_safe
def http_request(route: str, method: str, status: int, seconds: float) -> None:
    HTTP_SECONDS.labels(route, method, f"{status // 100}xx").observe(max(0.0, seconds))


def callback_outcome(kind: str, status: int) -> str:
    """A callback view's answer, in the words of smsgw_callbacks_received's ``outcome``."""
    if status == 200 and kind == "receipt":
        return "duplicate"  # the receipt view answers 201 stored, 200 already stored
    if 200 <= status < 300:
        return "stored"
    if status == 403:
        return "refused"
    if 400 <= status < 500:
        return "invalid"
    return "unavailable" if status == 503 else "error"


@_safe
def callback_received(kind: str, provider: str, status: int) -> None:
    CALLBACKS.labels(kind, provider, callback_outcome(kind, status)).inc()


def callbacks_counted(kind: str, *, providers: Container[str]):
    """A provider callback view (``view(request, provider)``) whose every answer is counted in
    smsgw_callbacks_received. A provider name not in ``providers`` counts as ``unknown``: the URL's
    segment is the client's word, and must not grow the label set."""

    def decorate(view):
        @functools.wraps(view)
        def counted(request, provider: str, *args, **kwargs):
            name = provider if provider in providers else "unknown"
            try:
                response = view(request, provider, *args, **kwargs)
            except Exception:
                callback_received(kind, name, 500)
                raise
            callback_received(kind, name, response.status_code)
            return response

        return counted

    return decorate


@_safe
def cancel_race(side: str, n: int = 1) -> None:
    CANCEL_RACES.labels(side).inc(n)


@_safe
def claim_failed(stage: str, exc: BaseException) -> None:
    # Exception classes are a set the code bounds (OperationalError, InterfaceError, ...).
    CLAIM_FAILURES.labels(stage, type(exc).__name__[:40]).inc()


@_safe
def webhook_attempt(result: str) -> None:
    WEBHOOKS.labels(result).inc()


@_safe
def quota_rejected(quota: str, n: int = 1) -> None:
    QUOTA_REJECTIONS.labels(quota).inc(n)


@_safe
def suppression_changed(action: str, source: str) -> None:
    SUPPRESSION_CHANGES.labels(action, source).inc()


@_safe
def opted_out_stopped(stage: str, n: int = 1) -> None:
    OPTED_OUT_STOPPED.labels(stage).inc(n)


@_safe
def rate_limited() -> None:
    RATE_LIMIT_REJECTIONS.inc()


@_safe
def callback_key_unknown(provider: str) -> None:
    CALLBACKS_KEY_UNKNOWN.labels(provider).inc()


@_safe
def broker_discarded_count(*, queue: str, reason: str) -> None:
    # The queue name comes from the broker, not from our routes (a message can be pushed anywhere):
    # bounded so that a flood of odd names cannot grow the label set without end.
    BROKER_DISCARDED.labels(str(queue)[:40], reason).inc()


# --- sweep liveness: one row, written at most once a second per process ----------------------------
HEARTBEAT_EVERY_SECONDS = 1.0
_last_beat: dict[str, float] = {}


@_safe
def heartbeat(name: str, *, now: datetime | None = None) -> None:
    from django.utils import timezone

    from smsgw.observability.models import Heartbeat

    mono = time.monotonic()
    if mono - _last_beat.get(name, float("-inf")) < HEARTBEAT_EVERY_SECONDS:
        return
    _last_beat[name] = mono
    at = now or timezone.now()
    if not Heartbeat.objects.filter(name=name).update(at=at):
        Heartbeat.objects.get_or_create(name=name, defaults={"at": at})


@_safe
def inbound_received(provider: str, *, duplicate: bool) -> None:
    INBOUND_RECEIVED.labels(provider, "duplicate" if duplicate else "stored").inc()


@_safe
def inbound_action(action: str) -> None:
    INBOUND_ACTIONS.labels(action).inc()


@_safe
def inbound_delivered(seconds: float) -> None:
    INBOUND_DELAY.observe(max(0.0, seconds))
