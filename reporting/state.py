"""State figures, read from the database at scrape time (a custom Collector), so they are the same from
whichever process or host answers the scrape and need no process to have seen the change.

Cost is what bounds this module (target: a scrape in under 100 ms with 1,000,000 pending messages,
``python -m bench metrics``). count(*) over a million rows of a partial index still reads a million
index entries, so a count is exact only while it is small: on PostgreSQL every count carries a LIMIT of
EXACT_BELOW rows (the work stays bounded even when the statistics are stale), and a count that reaches
it is replaced by the planner's estimate (EXPLAIN, no rows read; from ANALYZE statistics, which
autovacuum keeps fresh; multivariate statistics on (status, priority), migration observability 0002,
keep the pair's estimate within a few percent), never below what was counted. A backlog that large is
read for its trend, not its last digit. Finished statuses have no index (they are most of the table):
always the estimate on PostgreSQL. Oldest-due ages are one index probe each. SQLite (the embedded run)
counts exactly: it holds what one machine sends.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from delivery.models import ProviderCircuit, ProviderHostCircuit
from inbound.models import InboundMessage, InboundPart, InboundState
from receipts.models import ReceiptEvent, WebhookDelivery
from scheduling.models import Message, Priority, Status
from smsgw.observability.models import Heartbeat
from smsgw.observability.queues import queue_states_observe
from smsgw.runtime import broker

EXACT_BELOW = 10_000
ACTIVE = (Status.SCHEDULED, Status.QUEUED, Status.SENDING, Status.SENT)  # each has a partial index
TERMINAL = (Status.DELIVERED, Status.UNDELIVERED, Status.FAILED, Status.CANCELLED, Status.EXPIRED)
MSG = Message._meta.db_table
RECEIPT = ReceiptEvent._meta.db_table
WEBHOOK = WebhookDelivery._meta.db_table
INBOUND = InboundMessage._meta.db_table
INBOUND_PART = InboundPart._meta.db_table
UNROUTED_WINDOW = timedelta(hours=1)
REVIEW_WINDOW = timedelta(hours=24)


def _estimate(cur, sql: str, params: list) -> int:
    cur.execute("EXPLAIN (FORMAT JSON) " + sql, params)
    plan = cur.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return int(plan[0]["Plan"]["Plan Rows"])


def _select(where: str, table: str, columns: str = "1") -> str:
    return f'SELECT {columns} FROM "{table}" WHERE {where}'  # noqa: S608 - where is ours, values bound


def count(cur, where: str, params: list, *, table: str = MSG, exact_ok: bool = True) -> int:
    """Rows of ``table`` matching ``where`` (trusted SQL, values bound). On PostgreSQL: counted exactly
    up to EXACT_BELOW rows (the LIMIT bounds the work even when the statistics are stale), else the
    planner's estimate, never below what was counted. ``exact_ok=False``: the estimate only."""
    sql = _select(where, table)
    if connection.vendor != "postgresql":
        cur.execute(f"SELECT count(*) FROM ({sql}) AS c", params)  # noqa: S608
        return int(cur.fetchone()[0])
    if not exact_ok:
        return _estimate(cur, sql, params)
    cur.execute(f"SELECT count(*) FROM ({sql} LIMIT %s) AS c", [*params, EXACT_BELOW])  # noqa: S608
    counted = int(cur.fetchone()[0])
    return counted if counted < EXACT_BELOW else max(counted, _estimate(cur, sql, params))


def count_by_priority(cur, status: str) -> dict[str, int]:
    """Messages of ``status`` per priority: one bounded pass over that status's partial index while the
    status holds fewer than EXACT_BELOW rows, else one estimate per priority."""
    where = '"status" = %s'
    if connection.vendor == "postgresql":
        inner = _select(where, MSG, '"priority"') + " LIMIT %s"
        params = [status, EXACT_BELOW]
    else:
        inner, params = _select(where, MSG, '"priority"'), [status]
    cur.execute(f'SELECT "priority", count(*) FROM ({inner}) AS c GROUP BY "priority"', params)  # noqa: S608
    counted = {p: int(n) for p, n in cur.fetchall()}
    if connection.vendor != "postgresql" or sum(counted.values()) < EXACT_BELOW:
        return {p: counted.get(p, 0) for p in Priority.values}
    by_priority = '"status" = %s AND "priority" = %s'
    return {
        p: max(counted.get(p, 0), _estimate(cur, _select(by_priority, MSG), [status, p]))
        for p in Priority.values
    }


def _oldest(cur, column: str, where: str, params: list, *, table: str = MSG) -> datetime | None:
    # ORDER BY .. LIMIT 1 rather than min(): the partial index that matches `where` is walked from its
    # first entry, one probe, whatever the backlog.
    cur.execute(
        f'SELECT "{column}" FROM "{table}" WHERE {where} ORDER BY "{column}" LIMIT 1',  # noqa: S608
        params,
    )
    row = cur.fetchone()
    if row is None or row[0] is None:
        return None
    value = row[0]
    if isinstance(value, str):  # SQLite without converters
        value = datetime.fromisoformat(value)
    if timezone.is_naive(value):
        value = value.replace(tzinfo=UTC)
    return value


def _age(now: datetime, then: datetime | None) -> float:
    return max(0.0, (now - then).total_seconds()) if then else 0.0


class StateCollector:
    """prometheus_client custom collector: every figure below is computed when collect() runs."""

    def describe(self):
        return []  # no collect() at registration: registering must not query the database

    def collect(self):
        now = timezone.now()
        with connection.cursor() as cur:
            yield from self._messages(cur, now)
            yield from self._receipts_webhooks(cur, now)
            yield from self._inbound(cur, now)
        yield from self._circuits()
        yield from self._sweep(now)
        yield from _queues(now)

    def _messages(self, cur, now):
        by_status = GaugeMetricFamily(
            "smsgw_messages",
            f"Messages not finished yet, by status and priority (exact below {EXACT_BELOW}; above, the "
            "planner's estimate).",
            labels=["status", "priority"],
        )
        # Finished messages are most of the table and have no index: counting them is a full scan, so on
        # PostgreSQL this is always the estimate (the planner never says fewer than 1 row). For alerts
        # use the event counters (smsgw_dead_letters_total, smsgw_messages_sent_total).
        finished = GaugeMetricFamily(
            "smsgw_messages_finished_estimate",
            "Finished messages by status and priority: the planner's estimate on PostgreSQL (never "
            "below 1), exact on SQLite.",
            labels=["status", "priority"],
        )
        due = GaugeMetricFamily(
            "smsgw_due_backlog", "Scheduled messages already due (run_after <= now).", labels=["priority"]
        )
        oldest = GaugeMetricFamily(
            "smsgw_due_oldest_age_seconds",
            "Age of the oldest due scheduled message (now - run_after); 0 when none is due.",
            labels=["priority"],
        )
        for status in ACTIVE:
            for priority, n in count_by_priority(cur, status).items():
                by_status.add_metric([status, priority], n)
        for priority in Priority.values:
            for status in TERMINAL:
                n = count(cur, '"status" = %s AND "priority" = %s', [status, priority], exact_ok=False)
                finished.add_metric([status, priority], n)
            where = '"status" = %s AND "priority" = %s AND "run_after" <= %s'
            params = [Status.SCHEDULED, priority, now]
            due.add_metric([priority], count(cur, where, params))
            oldest.add_metric([priority], _age(now, _oldest(cur, "run_after", where, params)))
        yield by_status
        yield finished
        yield due
        yield oldest

    def _receipts_webhooks(self, cur, now):
        # Receipts due for processing: processed_at IS NULL (partial index receipt_unprocessed) and due.
        # A receipt waiting for its message's provider id is not due until its next try, so it does not
        # count as lag.
        where, params = '"processed_at" IS NULL AND "next_try_at" <= %s', [now]
        receipts = GaugeMetricFamily("smsgw_receipts_due", "Provider receipts waiting to be processed.")
        receipts.add_metric([], count(cur, where, params, table=RECEIPT))
        lag = GaugeMetricFamily(
            "smsgw_receipts_lag_seconds",
            "How long the oldest due receipt has waited for the receipt processor (0 when none).",
        )
        lag.add_metric([], _age(now, _oldest(cur, "next_try_at", where, params, table=RECEIPT)))
        yield receipts
        yield lag

        outbox = GaugeMetricFamily(
            "smsgw_webhook_outbox", "Tenant webhook notifications not delivered yet (pending)."
        )
        outbox.add_metric([], count(cur, '"status" = %s', ["pending"], table=WEBHOOK))
        oldest = GaugeMetricFamily(
            "smsgw_webhook_outbox_oldest_age_seconds",
            "How long the oldest due pending webhook notification has waited (0 when none).",
        )
        due_where = '"status" = %s AND "next_attempt_at" <= %s'
        oldest.add_metric(
            [], _age(now, _oldest(cur, "next_attempt_at", due_where, ["pending", now], table=WEBHOOK))
        )
        dead = GaugeMetricFamily(
            "smsgw_webhook_dead",
            "Webhook notifications dead-lettered (retries exhausted; replayable). Planner estimate on "
            'PostgreSQL: there is no index on dead rows; smsgw_webhook_attempts_total{result="dead"} '
            "counts each one exactly.",
        )
        dead.add_metric([], count(cur, '"status" = %s', ["dead"], table=WEBHOOK, exact_ok=False))
        yield outbox
        yield oldest
        yield dead

    def _inbound(self, cur, now):
        """Two-way messaging (docs/inbound.md, "Operators"). Each figure is one bounded read of a partial
        index: inbound_pending (next_try_at WHERE pending), inbound_unrouted, inbound_review, and the
        waiting parts' inbound_part_waiting."""
        pending_where, pending = '"state" = %s', [InboundState.PENDING]
        backlog = GaugeMetricFamily(
            "smsgw_inbound_pending",
            f"Inbound messages stored and not processed yet (exact below {EXACT_BELOW}; above, the "
            "planner's estimate).",
        )
        backlog.add_metric([], count(cur, pending_where, pending, table=INBOUND))
        oldest = GaugeMetricFamily(
            "smsgw_inbound_pending_oldest_age_seconds",
            "How long the oldest due pending inbound message has waited for the inbound processor "
            "(now - next_try_at; 0 when none).",
        )
        due_where = '"state" = %s AND "next_try_at" <= %s'
        oldest.add_metric(
            [], _age(now, _oldest(cur, "next_try_at", due_where, [*pending, now], table=INBOUND))
        )
        parts = GaugeMetricFamily(
            "smsgw_inbound_parts_waiting_oldest_seconds",
            "Age of the oldest part of a long inbound message still waiting for the rest (0 when none); "
            "a group is joined at SMSGW_INBOUND_PARTS_WAIT_SECONDS at the latest.",
        )
        # The oldest part still waiting for its group, in this module's form (one probe; SQLite's naive
        # times read as UTC).
        waiting = _oldest(cur, "received_at", '"message_id" IS NULL', [], table=INBOUND_PART)
        parts.add_metric([], _age(now, waiting))
        unrouted = GaugeMetricFamily(
            "smsgw_inbound_unrouted_recent",
            "Inbound messages received in the last hour for a number no tenant owns (kept as unrouted; "
            "the admin's Unrouted inbound messages).",
        )
        where = '"state" = %s AND "received_at" >= %s'
        unrouted.add_metric(
            [], count(cur, where, [InboundState.UNROUTED, now - UNROUTED_WINDOW], table=INBOUND)
        )
        review = GaugeMetricFamily(
            "smsgw_inbound_needs_review_recent",
            'Inbound messages received in the last 24 hours whose keyword was a near miss ("stop '
            "please\"), left for the tenant's review instead of applied.",
        )
        where = '"needs_review" AND "received_at" >= %s'
        review.add_metric([], count(cur, where, [now - REVIEW_WINDOW], table=INBOUND))
        yield backlog
        yield oldest
        yield parts
        yield unrouted
        yield review

    def _circuits(self):
        family = GaugeMetricFamily(
            "smsgw_provider_circuit_open",
            "1 while a provider account's circuit is open.",
            labels=["provider", "account"],
        )
        for provider, account, state in ProviderCircuit.objects.values_list("provider", "account", "state"):
            family.add_metric([provider, account], 1.0 if state == "open" else 0.0)
        yield family
        hosts = GaugeMetricFamily(
            "smsgw_provider_host_circuit_open",
            "1 while a sending host's circuit is open (that host cannot reach the provider account).",
            labels=["provider", "account", "host"],
        )
        for provider, account, host, state in ProviderHostCircuit.objects.values_list(
            "provider", "account", "host", "state"
        ):
            hosts.add_metric([provider, account, host], 1.0 if state == "open" else 0.0)
        yield hosts

    def _sweep(self, now):
        at = Heartbeat.objects.filter(name="sweep").values_list("at", flat=True).first()
        last = GaugeMetricFamily(
            "smsgw_sweep_last_completed_timestamp_seconds",
            "Unix time the last sweep pass completed (any process); 0 if none ever did.",
        )
        last.add_metric([], at.timestamp() if at else 0.0)
        age = GaugeMetricFamily(
            "smsgw_sweep_age_seconds", "Seconds since the last completed sweep pass (-1 if none ever did)."
        )
        age.add_metric([], _age(now, at) if at else -1.0)
        yield last
        yield age


def _queues(now):
    ready = GaugeMetricFamily(
        "smsgw_queue_ready_messages",
        "Messages ready in each routed broker queue (a passive declare; none while the broker does not "
        "answer). Reserved, unacknowledged ones are not counted.",
        labels=["queue"],
    )
    consumers = GaugeMetricFamily(
        "smsgw_queue_consumers",
        "Celery worker nodes consuming each routed queue (their heartbeats, any host).",
        labels=["queue"],
    )
    unconsumed = GaugeMetricFamily(
        "smsgw_queue_unconsumed_seconds",
        "How long each routed queue has had messages ready and no consumer (0 while consumed or empty; "
        "none while the broker does not answer).",
        labels=["queue"],
    )
    oldest = GaugeMetricFamily(
        "smsgw_queue_oldest_age_seconds",
        "How long the oldest ready message of each routed broker queue has waited since it was published (0 "
        "when empty). Redis and the embedded broker only: RabbitMQ does not show a queue's head "
        "(smsgw.runtime.broker).",
        labels=["queue"],
    )
    processes = GaugeMetricFamily(
        "smsgw_worker_processes",
        "Pool processes of the live worker nodes consuming each routed queue (a node consuming several "
        "queues counts its whole pool for each).",
        labels=["queue"],
    )
    busy = GaugeMetricFamily(
        "smsgw_worker_busy_processes",
        "Of those, how many were running a task at their node's last heartbeat (one sample every "
        "SMSGW_QUEUE_CONSUMER_HEARTBEAT_SECONDS); busy / processes is the utilisation.",
        labels=["queue"],
    )
    states = queue_states_observe(now=now)
    for state in states:
        consumers.add_metric([state.name], state.consumers)
        processes.add_metric([state.name], state.processes)
        busy.add_metric([state.name], state.busy)
        if state.ready is not None:
            ready.add_metric([state.name], state.ready)
        if state.unconsumed_seconds is not None:
            unconsumed.add_metric([state.name], state.unconsumed_seconds)
    for name, age in broker.queue_oldest_ages([s.name for s in states], now=now.timestamp()).items():
        if age is not None:
            oldest.add_metric([name], age)
    yield ready
    yield consumers
    yield unconsumed
    yield oldest
    yield processes
    yield busy
