"""Send worker service: queued -> sending -> (sent | queued again | failed | uncertain), per batch.

One task carries a batch of ids, but every message keeps its own CAS, attempt row, retry schedule and
timeline. Two short transactions per batch (claim + attempts; outcomes) instead of several per SMS.

What happens after the provider answers is decided by the error class (``ErrorClass``), never by a
provider's codes; the rules are one table, ``delivery.sending.outcomes.SUBMIT_MOVES``, and every delay is
computed
in ``delivery.sending.delays``. In short:

* accepted -> ``sent``;
* throttled (429, a full sender queue) -> ``queued`` again after a backoff (Retry-After when given); the
  attempt is not charged, since the message did nothing wrong;
* transient -> ``queued`` with exponential backoff, charged (bounded by SMSGW_RETRY_MAX_ATTEMPTS);
* account fault -> the scope is held (delivery.flow.provider_holds) and the message waits in ``queued``, not
charged;
* opted out -> ``failed`` with reason ``opted_out`` (and an OptOutSignal for the suppression list);
* permanent -> ``failed`` (dead letter);
* uncertain -> stays ``sending`` until the reconciler has asked the provider (delivery.sending.reconcile).
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from delivery.flow import circuit, pacing
from delivery.flow import provider_holds as holds_service
from delivery.guards import screening, suppression
from delivery.models import Attempt, OptOutSignal
from delivery.providers import get_adapter
from delivery.providers.base import (
    LATE_SEND_SECONDS,
    ErrorClass,
    ErrorInfo,
    Outcome,
    ProviderAdapter,
    Submission,
    SubmitResult,
)
from delivery.routing import failover
from delivery.sending import campaign_watch, delays, inflight, outcomes
from delivery.sending.attempts import attempts_finish, attempts_start
from delivery.sending.late import reslotter
from delivery.sending.outcomes import Delay, provider_failure, unanswered
from scheduling.campaigns import gate as campaign_gate
from scheduling.lifecycle import transitions
from scheduling.lifecycle.reasons import ReasonCode
from scheduling.models import Message, Status
from smsgw import stages
from smsgw.models import Tenant
from smsgw.observability import events
from smsgw.stages import Park

log = logging.getLogger(__name__)

TENANT_TABLE = Tenant._meta.db_table
# A paced message whose slot passed more than this before the worker had it takes a new slot from its
# sender's bucket (delivery.flow.pacing.late_reslot); one less late goes as it is. The same bound as for a
# process that wakes up late for a slot (delivery.sending.late).
LATE_SECONDS = LATE_SEND_SECONDS

CLAIM_RETURNING = (
    "id",
    "public_id",
    "version",
    "tenant_id",
    "to",
    "body",
    "from_number",
    "messaging_service_sid",
    "attempt_count",
    "provider_calls",
    "due_at",
    "expires_at",
    "reason_code",
    "priority",  # metrics: throughput and schedule lag by class
    "campaign_id",  # a paused campaign's paced messages are checked again at their slot
    "route",  # the route and its legs: a failover moves the message on (delivery.routing.failover)
    "route_plan",
    "route_leg",
    "segments",  # a late paced message takes its segments' worth of its sender's slots again
)


@dataclass
class BatchReport:
    claimed: int = 0
    expired: int = 0
    held: int = 0
    opted_out: int = 0
    refused: int = 0  # destination refused at execution (delivery.guards.destinations)
    failed_over: int = 0  # moved to their route's next leg before the claim (delivery.routing.failover)
    outcomes: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def validity_period(expires_at: datetime, now: datetime, adapter: ProviderAdapter | None = None) -> int:
    """``expires_at - now`` seconds, within the validity periods the provider accepts (its
    ``capabilities.validity_period``; default: the default provider's): nothing may leave the provider
    after it expired here."""
    seconds = math.ceil((expires_at - now).total_seconds())
    return (adapter or get_adapter()).clamp_validity(seconds)


def send_batch(
    message_ids: list[int],
    *,
    provider: str | None = None,
    not_before: list[float] | None = None,
    wait: bool = True,
) -> BatchReport:
    """Claim a batch of one provider's messages and submit them (the release step publishes a batch per
    provider; a task published before batches named their provider uses the default one, which every
    message then had). ``not_before``: paced messages' slots, in the order of ``message_ids``.

    Each answer is recorded as it arrives (delivery.sending.inflight). ``wait=False`` (the send task) returns
    once the submissions are started, the process's recorder thread recording them; ``wait=True``
    records them here, in the caller's thread, and reports the outcomes."""
    report = BatchReport()
    adapter = get_adapter(provider)
    now = timezone.now()
    # Each message's slot by id, whatever the filters below leave of the batch.
    slot_of: dict[int, float] = {}
    if not_before and len(not_before) == len(message_ids):
        slot_of = dict(zip(message_ids, not_before, strict=True))
    open_holds = holds_service.holds_open(adapter.name, adapter.account)
    if open_holds:
        # The per-process cache may be a second old, and another process may just have cleared the hold
        # and released its messages: parking them again on a stale view would hold them twice (and write
        # a second "held" entry). Holding is the rare path; it can afford a fresh read.
        open_holds = holds_service.holds_open(adapter.name, adapter.account, fresh=True)
    circuit_open = circuit.circuit_state(adapter.name, adapter.account).is_open
    host_open = circuit.host_state(adapter.name, adapter.account).is_open
    probes: dict[int, holds_service.OpenHold] = {}
    with transaction.atomic():
        expired = transitions.transition_many(
            message_ids,
            from_status=Status.QUEUED,
            to_status=Status.EXPIRED,
            kind="expired",
            extra_where='"expires_at" <= %s',
            extra_params=[now],
            set_fields={
                "run_after": None,
                "status_reason": "validity passed while queued",
                "reason_code": ReasonCode.EXPIRED,
            },
            now=now,
        )
        report.expired = len(expired)
        # The suppression list and the destination guards, checked again right before the claim (one
        # query, delivery.guards.screening): a recipient who opted out after the message was accepted, or a
        # destination the tenant may no longer send to, is never submitted; the message ends cancelled.
        screened = screening.batch_screen(message_ids, now=now)
        stopped = screened.stopped
        if stopped:
            report.opted_out = len(screened.opted_out)
            report.refused = len(screened.refused)
            message_ids = [mid for mid in message_ids if mid not in stopped]
        if open_holds or circuit_open or host_open:
            message_ids, parks, probes, moves = _admission_filter(
                message_ids,
                adapter.name,
                open_holds,
                circuit_open,
                now,
                host=(adapter.name, adapter.account) if host_open else None,
            )
            stages.park_rows()(parks, now)
            report.held = len(parks)
            report.failed_over = len(failover.failover_rows(moves, now=now)) if moves else 0
        # The CAS that makes duplicate tasks harmless: a re-published or redelivered batch finds its
        # rows already past `queued` and claims nothing. A disabled tenant's messages are not claimed
        # (they wait in `queued`; the release step parks them until the tenant is enabled again). Nor is a
        # paused or cancelled campaign's: the exclusion is in this statement, so once the pause commits no
        # later claim can take one of its messages.
        rows = transitions.transition_many(
            message_ids,
            from_status=Status.QUEUED,
            to_status=Status.SENDING,
            kind="attempt_started",
            set_fields={
                "run_after": now + timedelta(seconds=settings.SENDING_LEASE_SECONDS),
            },
            bump_attempts=True,
            returning=CLAIM_RETURNING,
            # Only this adapter's messages: a message is sent through the provider it was born with.
            extra_where=f'"provider" = %s AND "tenant_id" IN '
            f'(SELECT "id" FROM "{TENANT_TABLE}" WHERE "is_active") AND {campaign_gate.NOT_HALTED_SQL}',
            extra_params=[adapter.name, *campaign_gate.NOT_HALTED_PARAMS],
            details=lambda mid: {"provider": adapter.name, **({"probe": True} if mid in probes else {})},
            now=now,
        )
        if len(rows) < len(message_ids):
            _halted_skipped(set(message_ids) - {r["id"] for r in rows}, now)
        validity = {r["id"]: validity_period(r["expires_at"], now, adapter) for r in rows}
        # Committed with the claim, before any provider call: a crash from here on leaves evidence.
        attempts = attempts_start(rows, provider=adapter.name, started_at=now, validity=validity)
    report.claimed = len(rows)
    if not rows:
        return report

    base = settings.SMSGW_PUBLIC_BASE_URL
    slots = _slots(rows, slot_of, time.time(), adapter)  # measured now: the claim took its time too
    # A paced message that the process then wakes up too late for takes a new slot (delivery.sending.late),
    # asking for one until a quarter of the lease after the claim.
    reslot_by = now.timestamp() + settings.SENDING_LEASE_SECONDS / 4
    late_hooks = reslotter()
    # A circuit probe always goes; anything else stays unsent if this process has meanwhile seen the
    # account's circuit open (it then waits for the provider like everything else, uncharged).
    probing = {r["id"] for r in rows if r["reason_code"] == circuit.REASON_PROBE}

    def wanted(name: str = adapter.name, account: str = adapter.account) -> bool:
        return not circuit.seen_open(name, account) and not circuit.host_seen_open(name, account)

    def campaign_wanted(cid: int, name: str = adapter.name, account: str = adapter.account) -> bool:
        return campaign_watch.running(cid) and not circuit.seen_open(name, account)

    # Campaign messages may wait after the claim (for their paced slot, for room in this process's
    # flight): a pause in between must still stop them. The claim just saw these campaigns running.
    campaign_watch.watch(r["campaign_id"] for r in rows)

    submissions = [
        Submission(
            message_id=r["id"],
            to=r["to"],
            body=r["body"],
            sender=r["from_number"],
            sender_pool=r["messaging_service_sid"],
            status_callback=adapter.status_callback_url(base, r["public_id"].removeprefix("msg_"), a.number),
            idempotency_token=a.idempotency_token,
            validity_period=validity[r["id"]],
            expires_at=r["expires_at"],  # the period sent is taken again as the request is written
            not_before=slots.get(r["id"], 0.0),
            reslot=late_hooks.ask(
                provider=adapter.name,
                account=adapter.account,
                message_id=r["id"],
                sender=r["from_number"] or r["messaging_service_sid"],
                segments=r["segments"],
                deadline=reslot_by,
            )
            if r["id"] in slots
            else None,
            still_wanted=None
            if r["id"] in probing
            else (partial(campaign_wanted, r["campaign_id"]) if r["campaign_id"] else wanted),
        )
        for r, a in zip(rows, attempts, strict=True)
    ]
    items = [
        inflight.Pending(adapter, row, attempt, submission, probes.get(row["id"]))
        for row, attempt, submission in zip(rows, attempts, submissions, strict=True)
    ]
    pipeline = inflight.flight(outcomes_apply)
    if not wait:
        pipeline.submit(adapter, items)
        return report
    for group in pipeline.submit_and_wait(adapter, items):
        outcomes_apply(group)
        for _, res in group:
            report.outcomes[res.error_class or res.outcome] += 1
    return report


def outcomes_apply(done: list[inflight.Done]) -> None:
    """Record a group of answers as they came back (any mix of batches of one provider or several): the
    circuit and the rates hear of them first, then each message moves on, and a probe's hold is cleared
    or backed off."""
    by_adapter: dict[str, list[inflight.Done]] = defaultdict(list)
    for item in done:
        by_adapter[item[0].adapter.name].append(item)
    for group in by_adapter.values():
        adapter = group[0][0].adapter
        rows = [p.row for p, _ in group]
        attempts = [p.attempt for p, _ in group]
        results = [res for _, res in group]
        state = _report_health(adapter, rows, results)
        outcomes_record(adapter, rows, attempts, results, provider_down=state.is_open)
        for pending, res in group:
            hold = pending.probe
            if hold is not None and res.outcome == Outcome.ACCEPTED:
                holds_service.hold_clear(hold.id, by="probe", reason="probe message accepted")
            elif hold is not None and res.error_class == ErrorClass.ACCOUNT_FAULT:
                holds_service.hold_backoff(hold.id, detail=f"probe message refused: {res.error_code}")


def _slots(
    rows: list[dict], slot_of: Mapping[int, float], now: float, adapter: ProviderAdapter
) -> dict[int, float]:
    """Each claimed paced message's submission instant: its slot, or, when the slot passed before the
    worker had it (``LATE_SECONDS``), a new one at the end of its sender's line in the shared bucket
    (delivery.flow.pacing.late_reslot), so it does not go out together with that sender's next messages.
    A message its sender's bucket does not space keeps its spacing, shifted by the batch's delay. An
    on-time slot is never more than twice the release-ahead time away (a wrong clock never parks a
    worker); a new one, never more than a quarter of the lease (a sender whose line is longer than that
    keeps the shifted spacing)."""
    paced = {r["id"]: slot_of[r["id"]] for r in rows if slot_of.get(r["id"], 0.0) > 0}  # 0: goes at once
    if not paced:
        return {}
    longest = 2 * settings.PACING_RELEASE_AHEAD_SECONDS
    late = [r for r in rows if r["id"] in paced and paced[r["id"]] < now - LATE_SECONDS]
    if not late:
        return {mid: min(slot, now + longest) for mid, slot in paced.items()}
    late.sort(key=lambda r: paced[r["id"]])
    delay = now - paced[late[0]["id"]]
    moved = pacing.late_reslot(
        adapter.name,
        adapter.account,
        [(r["id"], r["from_number"] or r["messaging_service_sid"], r["segments"]) for r in late],
        horizon=settings.SENDING_LEASE_SECONDS / 4,
    )
    log.info(
        "paced batch reached the worker %.3f s after its first slot: %d of %d messages take new slots",
        delay,
        len(moved),
        len(paced),
    )
    out = {mid: min(slot, now + longest) for mid, slot in paced.items()}
    for r in late:
        mid = r["id"]
        out[mid] = moved[mid] if mid in moved else min(paced[mid] + delay, now + longest)
    return out


def _halted_skipped(ids: set[int], now: datetime) -> None:
    """Of the batch's messages the claim did not take, those of a paused campaign wait (parked until the
    campaign is resumed, so recovery does not take them for lost tasks), those of a cancelled one are
    cancelled. No query for a batch without campaign messages the claim left."""
    rows = list(
        Message.objects.filter(pk__in=ids, status=Status.QUEUED, campaign__isnull=False).values(
            "id", "version", "status", "reason_code", "expires_at", "campaign_id"
        )
    )
    halted = campaign_gate.halted((r["campaign_id"] for r in rows), lock=True)
    if not halted:
        return
    until = campaign_gate.pause_until(now)
    park = Park(until, campaign_gate.REASON_PAUSED, campaign_gate.PAUSED_TEXT, "campaign_paused", {})
    stages.park_rows()([(r, park) for r in rows if halted.get(r["campaign_id"]) == "paused"], now)
    campaign_gate.cancel_rows([r for r in rows if halted.get(r["campaign_id"]) == "cancelled"], now)


def _report_health(adapter: ProviderAdapter, rows: list[dict], results: list[SubmitResult]):
    """Tell the circuit breakers how the provider answered, and lower the rate of whatever it throttled
    (AIMD), before the outcomes are recorded (they depend on the account circuit's state). A failure with
    no answer at all counts against this host's circuit instead of the account's when another host got
    answers meanwhile (delivery.flow.circuit): one host cut off does not stop the others."""
    now = timezone.now()
    sent = [res for res in results if res.sent]
    failed = [res for res in sent if provider_failure(res)]
    cut = [res for res in failed if unanswered(res)]
    reached = [res for res in sent if not unanswered(res)]
    probes = [
        res
        for row, res in zip(rows, results, strict=True)
        if row["reason_code"] == circuit.REASON_PROBE and res.sent
    ]
    own = circuit.host_report(
        provider=adapter.name,
        account=adapter.account,
        answered=len(reached),
        unanswered=len(cut),
        probe_answered=any(not unanswered(res) for res in probes),
        probe_unanswered=any(unanswered(res) for res in probes),
        error=_reason(cut[0]) if cut else "",
        now=now,
    )
    ok = len(sent) - len(failed)
    if own:  # this host's own failures: neither the provider's successes nor its failures
        failed = [res for res in failed if not unanswered(res)]
    probe_ok = any(
        row["reason_code"] == circuit.REASON_PROBE and not provider_failure(res)
        for row, res in zip(rows, results, strict=True)
    )
    state = circuit.circuit_report(
        provider=adapter.name,
        account=adapter.account,
        ok=ok,
        failed=len(failed),
        error=_reason(failed[0]) if failed else "",
        probe_ok=probe_ok,
    )
    signals: dict[tuple[str, str], float | None] = {}
    for row, res in zip(rows, results, strict=True):
        if res.error_class == ErrorClass.THROTTLED:
            scope = str(res.scope or "account")
            value = (row["from_number"] or row["messaging_service_sid"]) if scope == "sender" else ""
            key = (scope, value)
            signals[key] = max(signals.get(key) or 0.0, res.retry_after or 0.0) or None
    for (scope, value), retry_after in signals.items():
        pacing.throttle_signal(
            provider=adapter.name, account=adapter.account, scope=scope, value=value, retry_after=retry_after
        )
    return state


def _admission_filter(  # noqa: C901, PLR0915 (one pass over the batch: each row takes one of the ways)
    message_ids: list[int],
    provider: str,
    open_holds: list[holds_service.OpenHold],
    circuit_open: bool,
    now: datetime,
    *,
    host: tuple[str, str] | None = None,
) -> tuple[
    list[int],
    list[tuple[Mapping[str, Any], Park]],
    dict[int, holds_service.OpenHold],
    list[tuple[Mapping[str, Any], str, str]],
]:
    """Split a batch into what may be submitted, what must wait and what moves to its route's next leg:
    everything but the probe while the account's circuit is open; everything but one probe when its turn
    has come while this host's circuit is open (``host``: the provider account it cannot reach), handed
    over to another host's workers (``_hand_over``), or parked briefly when no other host reaches the
    provider either; what an open hold covers (a sender or destination hold whose probe is due lets
    exactly one of its messages through; account-wide holds are probed without a message). A message that
    would wait for the account's circuit or a hold and has another leg fails over instead; a host that
    cannot reach the provider is not the provider's failure, so it hands over, never fails over."""
    # Only this provider's messages: one that already moved to another leg is not ours to hold or move.
    rows = Message.objects.filter(pk__in=message_ids, status=Status.QUEUED, provider=provider).values(
        "id",
        "version",
        "status",
        "to",
        "from_number",
        "messaging_service_sid",
        "reason_code",
        "expires_at",
        "route_plan",
        "route_leg",
        "priority",
    )
    allowed: list[int] = []
    parks: list[tuple[Mapping[str, Any], Park]] = []
    probes: dict[int, holds_service.OpenHold] = {}
    moves: list[tuple[Mapping[str, Any], str, str]] = []
    probing: set[int] = set()
    host_probe: Mapping[str, Any] | None = None
    handed: list[Mapping[str, Any]] = []
    others: bool | None = None  # does another host reach the provider (asked once, if needed)?
    for row in rows:
        if circuit_open and row["reason_code"] != circuit.REASON_PROBE and failover.has_next(row):
            moves.append((row, failover.Why.CIRCUIT, "provider circuit open"))
            continue
        if circuit_open and row["reason_code"] != circuit.REASON_PROBE:
            until = now + timedelta(seconds=delays.circuit_park_delay())
            text = "provider unavailable (circuit open); waiting"
            parks.append((row, Park(until, circuit.REASON_UNAVAILABLE, text, "provider_unavailable", {})))
            continue
        hold = next(
            (
                h
                for h in open_holds
                if h.matches(
                    to=row["to"],
                    from_number=row["from_number"],
                    messaging_service_sid=row["messaging_service_sid"],
                )
            ),
            None,
        )
        if host is not None and row["reason_code"] != circuit.REASON_PROBE:
            if hold is None and host_probe is None and circuit.host_probe_take(*host, now=now):
                host_probe = row  # this host's probe: submitted as the account circuit's probes are
                continue
            if others is None:
                others = circuit.others_answered(*host, host=circuit.host_id(), now=now)
            if others:
                handed.append(row)  # published again as it is: a worker of another host takes it
                continue
            until = now + timedelta(seconds=settings.HOST_CIRCUIT_PARK_SECONDS)
            # The host's name goes in the details (operators see it; the tenant's API drops it), not in
            # the status reason a tenant reads (smsgw.values.actors).
            text = "this host cannot reach the provider; waiting"
            park = Park(until, circuit.REASON_HOST, text, "host_unreachable", {"host": circuit.host_id()})
            parks.append((row, park))
            continue
        if hold is None:
            allowed.append(row["id"])
        elif (
            hold.scope != "account"
            and hold.id not in probing
            and hold.next_probe_at <= now
            and holds_service.hold_probe_take(hold.id, now=now)
        ):
            probing.add(hold.id)
            probes[row["id"]] = hold
            allowed.append(row["id"])
        elif failover.has_next(row):
            moves.append((row, failover.Why.HOLD, hold.describe()))
        else:
            details = {"hold_id": hold.id, "scope": hold.scope, "error_code": hold.error_code}
            park = Park(hold.park_until(now), holds_service.REASON_HELD, hold.describe(), "held", details)
            parks.append((row, park))
    if host_probe is not None:
        # Marked as a probe (its timeline says so) so that it goes even though every process of this host
        # holds back what it has not sent yet while the host circuit is open (``wanted``).
        marked = transitions.transition_versioned(
            [(host_probe["id"], host_probe["version"], {})],
            from_status=Status.QUEUED,
            to_status=Status.QUEUED,
            kind="host_probe",
            set_fields={
                "reason_code": circuit.REASON_PROBE,
                "status_reason": "probe: can this host reach it?",
            },
            details={"probe": True, "host": circuit.host_id()},
            now=now,
        )
        allowed += marked
    if handed:
        assert host is not None
        _hand_over(handed, provider=host[0], now=now)
    return allowed, parks, probes, moves


def _hand_over(rows: list[Mapping[str, Any]], *, provider: str, now: datetime) -> None:
    """While this host cannot reach the provider and another host can, its share of a batch is published
    again at once, unchanged (still released, its pacing slot spent once): the next worker to take it is
    as likely to be another host's, and nothing goes back through the release gate, whose slots a parked
    and re-released message would spend again for nothing. One ``host_unreachable`` entry per message
    (the reason says it was handed over); ``run_after`` stays the recovery time, as for any published
    message whose task could be lost."""
    host = circuit.host_id()
    fresh: list[tuple[int, int, dict[str, Any]]] = [
        (r["id"], r["version"], {}) for r in rows if r["reason_code"] != circuit.REASON_HOST
    ]
    transitions.transition_versioned(
        fresh,
        from_status=Status.QUEUED,
        to_status=Status.QUEUED,
        kind="host_unreachable",
        set_fields={
            "reason_code": circuit.REASON_HOST,
            "status_reason": "this host cannot reach the provider; handed over to another host",
        },
        details={"host": host, "handed_over": True},
        now=now,
    )
    by_priority: dict[str, list[int]] = defaultdict(list)
    for r in rows:
        by_priority[r["priority"]].append(r["id"])
    for priority, ids in by_priority.items():
        stages.publish_after_commit()(priority, ids, provider=provider)


def _reason(res: SubmitResult) -> str:
    title = f" ({res.error_title})" if res.error_title else ""
    return f"{res.http_status or 'network'} {res.error_code}{title} {res.error_message}".strip()[:200]


@dataclass
class _Recorded:
    """A group of answers sorted into the statements that record them."""

    sent: list[tuple[int, int, dict]] = field(default_factory=list)
    uncertain: list[tuple[int, int, dict]] = field(default_factory=list)
    # (kind, to_status) -> [(id, version, per-row values)]: every per-row value set names the same columns
    moves: dict[tuple[str, str], list[tuple[int, int, dict]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    details: dict[int, dict] = field(default_factory=dict)
    opt_outs: list[OptOutSignal] = field(default_factory=list)
    # To the route's next leg: (row, why, detail) (delivery.routing.failover)
    failovers: list[tuple[Mapping[str, Any], str, str]] = field(default_factory=list)


def outcomes_record(
    adapter: ProviderAdapter,
    rows: list[dict],
    attempts: list[Attempt],
    results: list[SubmitResult],
    *,
    provider_down: bool = False,
) -> None:
    """Record each answer, as the table says (delivery.sending.outcomes.SUBMIT_MOVES). ``provider_down``: the
    account's circuit is open, so a failure of the provider's own (timeout, connection error, 5xx) waits
    for it without costing the message an attempt."""
    now = timezone.now()
    batch = _Recorded()
    for row, attempt, res in zip(rows, attempts, results, strict=True):
        # Held back at its slot because its campaign was paused or cancelled meanwhile (or its state
        # could not be read)?
        halted = not res.sent and not campaign_watch.running(row.get("campaign_id"))
        move = outcomes.submit_move(res, halted=halted, circuit_open=provider_down)
        _attempt_answered(attempt, res, move, now)
        _move_add(batch, adapter, row, attempt, res, move, now)
    with transaction.atomic():
        attempts_finish(attempts, finished_at=now)
        sent_ids, moved = _moves_apply(batch, now)
        if batch.failovers:
            failover.failover_rows(batch.failovers, now=now)
        if batch.opt_outs:
            OptOutSignal.objects.bulk_create(batch.opt_outs)
            suppression.from_provider_signals(batch.opt_outs)
    moves, uncertain = batch.moves, batch.uncertain
    _metrics_record(adapter, rows, results, sent_ids, moves, moved, now)
    failed = len(moves.get(("failed", Status.FAILED), []))
    if failed or uncertain:
        public = {r["id"]: r["public_id"] for r in rows}
        ids = [public[mid] for mid, _, _ in [*moves.get(("failed", Status.FAILED), []), *uncertain]]
        log.warning("send batch: %d failed, %d uncertain", failed, len(uncertain), extra={"message_ids": ids})


def _attempt_answered(attempt: Attempt, res: SubmitResult, move: outcomes.Move, now: datetime) -> None:
    attempt.finished_at = now
    attempt.http_status = res.http_status
    attempt.provider_code = res.error_code
    attempt.error_class = str(res.error_class or "")
    attempt.provider_message_id = res.provider_message_id
    attempt.latency_ms = res.latency_ms
    attempt.response = res.response
    if res.validity_period is not None:  # the request was written: what it carried, not the claim's
        attempt.validity_seconds = res.validity_period
    assert move.attempt is not None  # every submission move (outcomes.SUBMIT_MOVES) names the outcome
    attempt.outcome = move.attempt


def _move_add(batch: _Recorded, adapter, row: dict, attempt: Attempt, res: SubmitResult, move, now) -> None:
    """One answer's move: its column values, its timeline details, and an opt-out signal if it says so."""
    mid, version = row["id"], row["version"]
    via = {"provider": adapter.name, **({"route": attempt.route} if attempt.route else {})}
    details = {"attempt": attempt.number, "error_code": res.error_code, "reason": _reason(res), **via}
    if move.status == Status.SENT:
        values: dict[str, Any] = {
            "provider_message_id": res.provider_message_id,
            "provider_status": res.provider_status,
        }
        batch.sent.append((mid, version, values))
        batch.details[mid] = {
            "provider_message_id": res.provider_message_id,
            "attempt": attempt.number,
            **via,
        }
        return
    batch.details[mid] = details
    if move.status == Status.SENDING:  # uncertain: the reconciler looks it up before any resend
        batch.uncertain.append((mid, version, {}))
        return
    why = _failover_why(move, row)
    if why:
        if move.delay == Delay.HOLD:  # the scope is held for every other message all the same
            _timing(move, adapter, row, res, now)
        batch.failovers.append(({**row, "status": Status.SENDING}, why, _reason(res)))
        return
    move, run_after, text, extra = _timing(move, adapter, row, res, now)
    if move.delay == Delay.NOW:
        details = batch.details[mid] = {"attempt": attempt.number, "reason": "not sent: campaign halted"}
    values = {"run_after": run_after} if move.status == Status.QUEUED else {}
    values.update(
        {
            "attempt_count": outcomes.attempt_count_after(row["attempt_count"], move),
            "error_code": extra.pop("error_code", res.error_code),
            "reason_code": extra.pop("reason_code", move.reason_code),
            "status_reason": text[:255],
        }
    )
    details.update(extra)
    if move.status == Status.QUEUED and move.delay not in (Delay.HOLD, Delay.NOW):
        details["retry_at"] = run_after.isoformat()
    if not move.charged:
        details["charged"] = False
    if move.dead_letter:
        details["dead_letter"] = True
    batch.moves[(move.kind, move.status)].append((mid, version, values))
    if move.opt_out:
        batch.opt_outs.append(
            OptOutSignal(
                tenant_id=row["tenant_id"],
                to=row["to"],
                from_number=row["from_number"],
                messaging_service_sid=row["messaging_service_sid"],
                provider=adapter.name,
                error_code=res.error_code,
                message_id=mid,
                created_at=now,
            )
        )


def _failover_why(move: outcomes.Move, row: dict) -> str:
    """Why this answer moves the message to its route's next leg ("": it does not, or there is none).
    Only answers that prove the provider did not take it (delivery.routing.failover)."""
    if not failover.has_next(row):
        return ""
    if move.delay == Delay.HOLD:
        return failover.Why.HOLD
    if move.delay == Delay.CIRCUIT:
        return failover.Why.CIRCUIT
    if move.delay == Delay.RETRY and row["attempt_count"] >= settings.FAILOVER_RETRY_ATTEMPTS:
        return failover.Why.RETRIES
    return ""


def _timing(move: outcomes.Move, adapter, row: dict, res: SubmitResult, now: datetime):
    """(the move made, run_after, status text, extra details) for the move's delay
    (delivery.sending.delays)."""
    reason, expires = _reason(res), row["expires_at"]
    if move.delay == Delay.NOW:
        # Back to waiting, due at once: the release step decides on the campaign's committed state
        # (parked, cancelled or sent), so a resume in between cannot leave it parked.
        state = campaign_watch.state(row["campaign_id"])
        if state == "paused":
            return move, min(now, expires), campaign_gate.PAUSED_TEXT, {"error_code": ""}
        return move, min(now, expires), f"not sent: campaign {state}", {"error_code": "", "reason_code": ""}
    if move.delay == Delay.THROTTLE:
        wait = delays.throttle_delay(uncharged_calls=delays.uncharged_calls(row), retry_after=res.retry_after)
        at = min(now + timedelta(seconds=wait), expires)
        return move, at, f"provider throttled: {reason}; resend at {at:%H:%M:%S}", {}
    if move.delay == Delay.HOLD:
        hold = holds_service.hold_open_for(
            provider=adapter.name,
            account=adapter.account,
            info=ErrorInfo(ErrorClass.ACCOUNT_FAULT, res.error_title or reason, res.scope),
            error_code=res.error_code or str(res.http_status or ""),
            message=row,
            now=now,
        )
        return move, hold.park_until(now), hold.describe(), {"hold_id": hold.id, "scope": hold.scope}
    if move.delay == Delay.CIRCUIT:
        until = now + timedelta(seconds=delays.circuit_park_delay())
        return move, min(until, expires), f"provider unavailable (circuit open): {reason}", {}
    if move.delay == Delay.UNAVAILABLE:
        # The provider is unavailable, not the message wrong: an outage of any length ends a message
        # only by its validity. Backoff still grows with its earlier failures.
        uncharged = delays.uncharged_calls(row)
        wait = delays.unavailable_delay(uncharged_calls=uncharged, retry_after=res.retry_after)
        until = now + timedelta(seconds=wait)
        return move, min(until, expires), f"provider unavailable: {reason}; retry at {until:%H:%M:%S}", {}
    if move.delay == Delay.RETRY:
        decision = delays.retry_decide(
            attempt_number=row["attempt_count"],
            now=now,
            first_due=row["due_at"],
            expires_at=expires,
            retry_after=res.retry_after,
        )
        if decision.retry:
            return move, decision.run_after, f"transient: {reason}; {decision.reason}", {}
        return move.otherwise, None, f"{decision.reason}; last: {reason}", {}
    return move, None, f"rejected by provider: {reason}", {}


def _moves_apply(batch: _Recorded, now: datetime) -> tuple[list[int], dict[tuple[str, str], list[int]]]:
    """One compare-and-set statement per move kind (a duplicate task's stale rows move nothing)."""
    sent_ids = transitions.transition_versioned(
        batch.sent,
        from_status=Status.SENDING,
        to_status=Status.SENT,
        kind=outcomes.SENT.kind,
        per_row_columns=("provider_message_id", "provider_status"),
        set_fields={
            "sent_at": now,
            "run_after": None,
            "error_code": "",
            "status_reason": "",
            "reason_code": outcomes.SENT.reason_code,
        },
        details=batch.details.get,
        now=now,
    )
    moved: dict[tuple[str, str], list[int]] = {}
    for (kind, to_status), items in batch.moves.items():
        extra = {"failed_at": now, "run_after": None} if to_status == Status.FAILED else {}
        moved[(kind, to_status)] = transitions.transition_versioned(
            items,
            from_status=Status.SENDING,
            to_status=to_status,
            kind=kind,
            per_row_columns=tuple(items[0][2]),
            set_fields=extra,
            details=batch.details.get,
            now=now,
        )
    transitions.transition_versioned(
        batch.uncertain,
        from_status=Status.SENDING,
        to_status=Status.SENDING,
        kind=outcomes.UNCERTAIN.kind,
        set_fields={
            "run_after": now + timedelta(seconds=delays.reconcile_first_look_delay()),
            "reason_code": outcomes.UNCERTAIN.reason_code,
            "status_reason": "provider did not answer; will look the message up before any resend",
        },
        details=batch.details.get,
        now=now,
    )
    return sent_ids, moved


def _metrics_record(adapter, rows, results, sent_ids, moves, moved, now) -> None:
    """After commit: what the provider answered, and only the moves that won their compare-and-set (a
    duplicate task that lost changed nothing and counts nothing)."""
    events.provider_answers(adapter.name, results)
    won = set(sent_ids)
    events.messages_sent([r for r in rows if r["id"] in won], now)
    retries: dict[str, int] = defaultdict(int)
    dead: dict[str, int] = defaultdict(int)
    for (kind, to_status), ids in moved.items():
        if not ids:
            continue
        if to_status == Status.FAILED:
            reasons = {mid: values.get("reason_code", kind) for mid, _, values in moves[(kind, to_status)]}
            for mid in ids:
                dead[reasons.get(mid, kind)] += 1
        else:
            retries[kind] += len(ids)
    events.send_moves(retries, dead)
