"""Releasing due messages: the one hand-off from the store to the send queues, for first sends and retries.

Every message that is due, whether ``scheduled`` (its time came) or ``queued`` with ``run_after`` passed
(a retry's backoff elapsed, a broker message presumed lost, a held or paced message whose wait ended),
goes through the same steps in one transaction:

1. claimed in bounded batches (FOR UPDATE SKIP LOCKED on PostgreSQL, so sweepers take disjoint rows);
   under a backlog, each other tenant with due work is claimed too (its oldest few), so a tenant's
   backlog never hides another tenant's messages from the pass;
2. the campaign's and the tenant's state: a paused campaign's messages wait (``campaign_paused``) until
   it is resumed, a cancelled one's are cancelled (scheduling.campaigns.gate); a disabled tenant's
   messages wait (``tenant_disabled``) until it is enabled;
3. quiet hours, checked against the clock now (a message made due late, or a retry, must not go out at
   night): inside the window it waits for the window's end;
4. the release gates, in the order the composition root lists them (config.wiring: velocity review,
   then capacity, fairness and circuit breaker, then the daily quota): they say which go now and until
   when the others wait (``scheduling`` knows nothing of providers: the gates reach it through
   ``smsgw.stages``);
5. the released ones move to ``queued`` and are published after commit; the others stay where they are
   with ``run_after`` at their expected time and the reason, and a timeline entry the first time.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Field
from django.utils import timezone

from scheduling.campaigns import gate as campaign_gate
from scheduling.dispatch import recovery
from scheduling.dispatch.quiet import QuietWindow
from scheduling.dispatch.recovery import send_queue
from scheduling.lifecycle import transitions
from scheduling.lifecycle.reasons import ReasonCode
from scheduling.models import Message, Status
from smsgw import stages, tracing
from smsgw.models import Tenant
from smsgw.runtime.db import is_postgres
from smsgw.stages import Candidate, Decision, Gate, Park
from smsgw.tracing.tasks import publish_headers

REASON_DISABLED = ReasonCode.TENANT_DISABLED
PACED = ReasonCode.PACED
# Reasons a released message keeps: the send worker looks at them again (an account hold that is still
# open parks the message once more, without a second timeline entry).
KEEP_ON_RELEASE = frozenset({ReasonCode.PROVIDER_HOLD})
REASON_QUIET = ReasonCode.QUIET_HOURS
PRIORITIES = ("transactional", "bulk")
# Under a backlog: other tenants with due work get this many of their oldest claimed per pass, and at
# most this many tenants are looked at (the rest on later passes: the walk starts after the last one).
TENANT_HEAD = 50
TENANT_WALK = 200

_COLUMNS = (
    "id",
    "version",
    "status",
    "tenant_id",
    "priority",
    "to",
    "from_number",
    "sender_pool",
    "segments",
    "run_after",
    "reason_code",
    "expires_at",
    "due_at",
    "quiet_start",
    "quiet_end",
    "quiet_timezone",
    "quiet_deferred_from",
    "status_reason",
    "provider",
    "published_at",
    "queued_at",
    "campaign_id",
    "trace_context",  # the pass's span links to each released message's trace (smsgw.tracing)
)


def release_gates() -> list[Gate]:
    """The gates in force, in their order (the composition root lists them: config.wiring)."""
    return [g.gate for g in stages.release_gates() if g.switch is None or getattr(settings, g.switch)]


def release_ticks(now: datetime) -> None:
    for tick in stages.release_ticks():
        tick(now)


@dataclass
class ReleaseReport:
    queued: dict[str, int] = field(default_factory=dict)
    republished: int = 0
    paced: int = 0
    unavailable: int = 0
    quiet_deferred: int = 0
    disabled: int = 0
    recovery_deferred: int = 0  # stale `queued` rows still behind a backlog: looked at again later
    full: bool = False  # a claim took as many rows as it may: more may be due already

    @property
    def total(self) -> int:
        return (
            sum(self.queued.values()) + self.republished + self.paced + self.unavailable + self.quiet_deferred
        )


def _column(name: str) -> str:
    field = Message._meta.get_field(name)
    # get_field also finds reverse relations; _COLUMNS names concrete fields, which always have a column.
    assert isinstance(field, Field) and field.column is not None
    return field.column


def _select(where: str, params: list, order: str, limit: int) -> list[dict]:
    cols = ", ".join(f'"{_column(c)}"' for c in _COLUMNS)
    lock = " FOR UPDATE SKIP LOCKED" if is_postgres() else ""
    table = Message._meta.db_table
    with connection.cursor() as cur:
        cur.execute(
            f'SELECT {cols} FROM "{table}" WHERE {where} ORDER BY {order} LIMIT %s{lock}',  # noqa: S608
            [*params, limit],
        )
        return transitions.rows_from(cur, _COLUMNS)


def _due_tenants(priority: str, now: datetime, exclude: set[int]) -> list[int]:
    """Tenants with due ``scheduled`` messages of a priority, walked over the (priority, tenant, run_after)
    index: two index probes per tenant that has scheduled messages, whatever their number."""
    table = Message._meta.db_table
    if not is_postgres():
        rows = (
            Message.objects.filter(status=Status.SCHEDULED, priority=priority, run_after__lte=now)
            .values_list("tenant_id", flat=True)
            .distinct()
        )
        return [t for t in rows if t not in exclude][:TENANT_WALK]
    sql = f"""
        WITH RECURSIVE t(tid) AS (
            (SELECT "tenant_id" FROM "{table}" WHERE "status" = 'scheduled' AND "priority" = %(p)s
             ORDER BY "tenant_id" LIMIT 1)
            UNION ALL
            SELECT (SELECT "tenant_id" FROM "{table}" WHERE "status" = 'scheduled' AND "priority" = %(p)s
                    AND "tenant_id" > t.tid ORDER BY "tenant_id" LIMIT 1)
            FROM t WHERE t.tid IS NOT NULL
        )
        SELECT tid FROM t WHERE tid IS NOT NULL AND EXISTS (
            SELECT 1 FROM "{table}" WHERE "status" = 'scheduled' AND "priority" = %(p)s
            AND "tenant_id" = t.tid AND "run_after" <= %(now)s)
        LIMIT %(walk)s
    """  # noqa: S608 - table name from model metadata
    with connection.cursor() as cur:
        cur.execute(sql, {"p": priority, "now": now, "walk": TENANT_WALK + len(exclude)})
        return [r[0] for r in cur.fetchall() if r[0] not in exclude][:TENANT_WALK]


def _claim_candidates(now: datetime, limit: int) -> tuple[list[dict], bool]:
    """The rows this pass looks at, and whether any claim filled its batch (more may be due)."""
    rows: list[dict] = []
    # Messages whose paced slot has come first (an index of their own: msg_waiting_reason), then the
    # others due: a large backlog due at one moment is older than every slot promised from it and must
    # not keep those slots from being served while it is being paced.
    # A paced message waits with run_after at its expected slot; it is claimed a little ahead of it so
    # that the gate can release it for that slot (the send worker submits it at that instant).
    ahead = now + timedelta(seconds=settings.PACING_RELEASE_AHEAD_SECONDS)
    rows += _select(
        '"status" IN (%s, %s) AND "reason_code" = %s AND "run_after" <= %s',
        [Status.SCHEDULED, Status.QUEUED, PACED, ahead],
        '"run_after"',
        limit,
    )
    full = len(rows) == limit
    # While paced slots are being served, a pass takes fewer new messages to project: each one costs a
    # park and a timeline entry, and a long pass would commit its releases after their slots.
    head_limit = limit // 4 if rows else limit
    for priority in PRIORITIES:
        head = _select(
            '"status" = %s AND "priority" = %s AND "run_after" <= %s AND "reason_code" <> %s',
            [Status.SCHEDULED, priority, now, PACED],
            '"run_after"',
            head_limit,
        )
        rows += head
        if len(head) == head_limit:  # a backlog: make sure every other tenant with due work is in it
            full = True
            for tenant_id in _due_tenants(priority, now, {r["tenant_id"] for r in head}):
                rows += _select(
                    '"status" = %s AND "priority" = %s AND "tenant_id" = %s AND "run_after" <= %s '
                    'AND "reason_code" <> %s',
                    [Status.SCHEDULED, priority, tenant_id, now, PACED],
                    '"run_after"',
                    TENANT_HEAD,
                )
    stale = _select(
        '"status" = %s AND "run_after" <= %s AND "reason_code" <> %s',
        [Status.QUEUED, now, PACED],
        '"run_after"',
        limit,
    )
    return rows + stale, full or len(stale) == limit


def _inactive(tenant_ids: set[int]) -> set[int]:
    return set(Tenant.objects.filter(pk__in=tenant_ids, is_active=False).values_list("pk", flat=True))


def due_release(*, now: datetime | None = None, limit: int | None = None) -> ReleaseReport:
    started = time.time_ns()  # the claim's span, made only for a pass that released something
    now = now or timezone.now()
    limit = limit or settings.SWEEP_BATCH_SIZE
    report = ReleaseReport()
    published: dict[tuple[str, str], list[int]] = {}
    with transaction.atomic():
        rows, report.full = _claim_candidates(now, limit)
        if not rows:
            return report
        # A stale `queued` row whose task still waits behind a backlog is looked at again later, without
        # an entry; only what the broker really lost is re-published (scheduling.dispatch.recovery).
        rows, later, why = recovery.stale_split(rows, now)
        if later:
            transitions.run_after_set_many([(r["id"], at) for r, at in later], status=Status.QUEUED)
            report.recovery_deferred = len(later)
        parks: list[tuple[dict, Park]] = []
        rows = _campaigns_halted(rows, parks, now)
        by_id = {r["id"]: r for r in rows}
        inactive = _inactive({r["tenant_id"] for r in rows})
        quiet: list[tuple[dict, datetime, QuietWindow]] = []
        candidates: list[Candidate] = []
        for r in rows:
            if r["tenant_id"] in inactive:
                until = now + timedelta(seconds=settings.DISABLED_TENANT_RECHECK_SECONDS)
                text = "tenant disabled: waiting until it is enabled again"
                parks.append((r, Park(until, REASON_DISABLED, text, "tenant_disabled", {})))
                continue
            if r["quiet_timezone"]:
                window = QuietWindow(r["quiet_start"], r["quiet_end"], r["quiet_timezone"])
                end = window.defer(now)
                if end is not None:
                    quiet.append((r, end, window))
                    continue
            candidates.append(
                Candidate(
                    id=r["id"],
                    version=r["version"],
                    status=r["status"],
                    tenant_id=r["tenant_id"],
                    priority=r["priority"],
                    sender=r["from_number"] or r["sender_pool"],
                    segments=r["segments"],
                    run_after=r["run_after"],
                    reason_code=r["reason_code"],
                    expires_at=r["expires_at"],
                    provider=r["provider"],
                    to=r["to"],
                )
            )
        decision = Decision(release=candidates)
        for gate in release_gates():
            earlier, decision = decision, gate(decision.release, now)
            parks += [(by_id[c.id], p) for c, p in decision.park]
            # A later gate (limits: the daily quota) narrows the release; slots and probes carry over.
            decision.probes |= earlier.probes
            decision.not_before = {**earlier.not_before, **decision.not_before}
        report.quiet_deferred = _quiet_defer(quiet, now)
        park_rows(parks, now, report)
        _release(decision, by_id, now, report, published, why)
        with _claim_span(started, published, by_id, report):
            for (priority, provider), ids in published.items():
                publish_after_commit(priority, ids, provider=provider, not_before=decision.not_before)
    return report


def _claim_span(started: int, published: dict, by_id: dict, report: ReleaseReport):
    """The sweep's claim as a span (smsgw.tracing), from the pass's start, when it released anything:
    linked to each released message's trace, and the parent of the send batches published from it (their
    `traceparent` header). An idle pass (several a second) makes none."""
    released = [mid for ids in published.values() for mid in ids]
    if not released or not tracing.enabled():
        return nullcontext()
    return tracing.span(
        "sweep claim",
        kind=tracing.SpanKind.PRODUCER,
        start_time=started,
        links=(by_id[mid]["trace_context"] for mid in released if mid in by_id),
        attributes={
            "smsgw.released": len(released),
            "smsgw.queued": sum(report.queued.values()),
            "smsgw.republished": report.republished,
            "smsgw.parked": report.paced + report.unavailable + report.disabled,
        },
    )


def _campaigns_halted(rows: list[dict], parks: list[tuple[dict, Park]], now: datetime) -> list[dict]:
    """Messages of paused campaigns wait where they are until resumed (parked once, out of the due range:
    a long pause is not re-read every pass); those of cancelled campaigns are cancelled here. One
    primary-key query, only when the pass holds campaign messages."""
    halted = campaign_gate.halted((r["campaign_id"] for r in rows), lock=True)
    if not halted:
        return rows
    until = campaign_gate.pause_until(now)
    stop, go = [], []
    for r in rows:
        state = halted.get(r["campaign_id"])
        if state == "cancelled":
            stop.append(r)
        elif state == "paused":
            parks.append(
                (
                    r,
                    Park(
                        until, campaign_gate.REASON_PAUSED, campaign_gate.PAUSED_TEXT, "campaign_paused", {}
                    ),
                )
            )
        else:
            go.append(r)
    campaign_gate.cancel_rows(stop, now)
    return go


def _release(
    decision: Decision, by_id: dict, now: datetime, report: ReleaseReport, published: dict, why: dict
) -> None:
    recovery = now + timedelta(seconds=settings.QUEUED_RECOVERY_SECONDS)
    groups: dict[tuple[str, str, str], list[tuple[int, int, dict]]] = {}
    for c in decision.release:
        reason = ReasonCode.CIRCUIT_PROBE if c.id in decision.probes else ""
        status_reason = ""
        if c.reason_code in KEEP_ON_RELEASE:  # the send worker checks it again (a hold still open)
            reason, status_reason = c.reason_code, by_id[c.id].get("status_reason", "")
        values = {
            "run_after": recovery,
            "reason_code": reason,
            "status_reason": status_reason,
            "published_at": now,
        }
        groups.setdefault((c.status, c.priority, c.provider), []).append(
            (c.id, by_id[c.id]["version"], values)
        )
    for (status, priority, provider), items in groups.items():
        first = status == Status.SCHEDULED
        columns = ("run_after", "reason_code", "status_reason", "published_at")
        # Usually every row gets the same values (a probe or a kept hold reason is the exception): then
        # they are constants of the statement, not arrays converted value by value (a third of a pass).
        uniform = all(values == items[0][2] for _, _, values in items)
        moved = transitions.transition_versioned(
            [(mid, version, {} if uniform else values) for mid, version, values in items],
            from_status=status,
            to_status=Status.QUEUED,
            kind="queued" if first else "republished",
            set_fields=items[0][2] if uniform else None,
            per_row_columns=() if uniform else columns,
            details=lambda mid: {
                **({"probe": True} if mid in decision.probes else {}),
                **({"reason": why[mid]} if mid in why else {}),
            },
            now=now,
        )
        if first:
            report.queued[priority] = report.queued.get(priority, 0) + len(moved)
        else:
            report.republished += len(moved)
        published.setdefault((priority, provider), []).extend(moved)


def park_rows(
    parks: Sequence[tuple[Mapping[str, Any], Park]], now: datetime, report: ReleaseReport | None = None
) -> None:
    """Messages that wait stay in their status: run_after at the expected time (never past their validity,
    so they expire on time), the reason, and a timeline entry only when the reason is new."""
    again: dict[str, list[tuple[int, datetime]]] = {}
    fresh: dict[tuple[str, str], list[tuple[int, int, dict]]] = {}
    details: dict[int, dict] = {}
    for row, park in parks:
        until = min(park.until, row["expires_at"]) if row["expires_at"] else park.until
        if report is not None and park.reason_code == ReasonCode.PACED:
            report.paced += 1
        elif report is not None and park.reason_code == ReasonCode.PROVIDER_UNAVAILABLE:
            report.unavailable += 1
        if row["reason_code"] == park.reason_code:
            again.setdefault(row["status"], []).append((row["id"], until))
            continue
        values = {"run_after": until, "reason_code": park.reason_code, "status_reason": park.status_reason}
        fresh.setdefault((row["status"], park.kind), []).append((row["id"], row["version"], values))
        # A gate may say there is no expected time (held for review: not before an operator releases it).
        details[row["id"]] = {"expected_send_at": until.isoformat(), **park.details}
    for (status, kind), items in fresh.items():
        transitions.transition_versioned(
            items,
            from_status=status,
            to_status=status,
            kind=kind,
            per_row_columns=("run_after", "reason_code", "status_reason"),
            details=details.get,
            now=now,
        )
    for status, waits in again.items():
        transitions.run_after_set_many(waits, status=status)


def _quiet_defer(quiet: list[tuple[dict, datetime, QuietWindow]], now: datetime) -> int:
    """Inside its quiet window now: a scheduled message moves to the window's end (its due time too, the
    first due time kept); a queued retry waits for it. One timeline entry each time."""
    moved = 0
    by_status: dict[str, list[tuple[int, int, dict]]] = {}
    details: dict[int, dict] = {}
    for row, end, window in quiet:
        if row["status"] == Status.SCHEDULED:
            first_due = row["quiet_deferred_from"] or row["due_at"]
            values = {"due_at": end, "run_after": end, "quiet_deferred_from": first_due}
        else:
            values = {"run_after": end, "reason_code": REASON_QUIET}
        by_status.setdefault(row["status"], []).append((row["id"], row["version"], values))
        details[row["id"]] = {
            "stage": "execution" if row["status"] == Status.SCHEDULED else "retry",
            "reason": "due while inside quiet hours",
            "quiet_hours": window.as_dict(),
            "due_at": row["due_at"].isoformat(),
            "new_due_at": end.isoformat(),
            "note": window.describe_move(now, end),
        }
    for status, items in by_status.items():
        moved += len(
            transitions.transition_versioned(
                items,
                from_status=status,
                to_status=status,
                kind="quiet_hours_deferred",
                details=details.get,
                per_row_columns=tuple(items[0][2]),
                now=now,
            )
        )
    return moved


def _batches(ids: list[int], not_before: dict[int, float]) -> list[tuple[list[int], list[float]]]:
    """Send batches of at most SEND_BATCH_SIZE; paced ones in slot order, with their slots."""
    size = settings.SEND_BATCH_SIZE
    if not not_before:
        return [(ids[i : i + size], []) for i in range(0, len(ids), size)]
    ordered = sorted(ids, key=lambda i: not_before.get(i, 0.0))
    return [
        (ordered[i : i + size], [not_before.get(m, 0.0) for m in ordered[i : i + size]])
        for i in range(0, len(ordered), size)
    ]


def _publish(
    queue: str, ids: list[int], provider: str, not_before: dict[int, float], headers: dict[str, str]
) -> None:
    for batch, slots in _batches(ids, not_before):
        kwargs: dict = {"provider": provider}
        if any(slots):
            # The worker submits each at its slot: its event loop waits, not its process
            # (delivery.sending.inflight); a batch that reaches it late keeps its spacing.
            kwargs["not_before"] = slots
        stages.send_batch().apply_async(args=[batch], kwargs=kwargs, queue=queue, headers=headers)


def publish_after_commit(
    priority: str, ids: list[int], *, provider: str, not_before: dict[int, float] | None = None
) -> None:
    """Send work for these ids (all of one provider: a batch goes through one adapter) to their
    priority's queue once the transaction that queued them commits; paced ones with their slots."""
    if ids:
        slots = {i: not_before[i] for i in ids if i in not_before} if not_before else {}
        headers = publish_headers()  # the pass's span, now: the publish runs after it ended
        transaction.on_commit(lambda: _publish(send_queue(priority), ids, provider, slots, headers))
