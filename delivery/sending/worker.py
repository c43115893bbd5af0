"""Send worker service: queued -> sending -> (sent | queued again | failed | uncertain), per batch.

One task carries a batch of ids, but every message keeps its own CAS, attempt row, retry schedule and
timeline. Two short transactions per batch (claim + attempts; outcomes) instead of several per SMS.

Here: the claim (after the checks right before it, delivery.sending.admission) and the submissions
(delivery.sending.inflight). What happens after the provider answers (delivery.sending.recording) is decided
by the error class (``ErrorClass``), never by a provider's codes; the rules are one table,
``delivery.outcomes.table.SUBMIT_MOVES``, made by the outcome room's mover (delivery.outcomes.mover), every
delay computed in ``delivery.outcomes.delays``. In short:

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

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from delivery.flow import circuit, host_circuit, pacing
from delivery.flow import provider_holds as holds_service
from delivery.guards import screening
from delivery.models import Attempt
from delivery.providers import get_adapter
from delivery.providers.base import LATE_SEND_SECONDS, ProviderAdapter, Submission
from delivery.routing import failover
from delivery.sending import campaign_watch, inflight
from delivery.sending.admission import admission_split, halted_skipped
from delivery.sending.attempts import attempts_start
from delivery.sending.late import reslotter
from delivery.sending.recording import outcomes_apply
from scheduling.campaigns import gate as campaign_gate
from scheduling.lifecycle import transitions
from scheduling.lifecycle.reasons import ReasonCode
from scheduling.models import Message, Status
from smsgw import stages, tracing
from smsgw.models import Tenant
from smsgw.observability import events

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
    "sender_pool",
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
    "trace_context",  # the send and provider spans link to the message's trace (smsgw.tracing)
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
    try:
        claimed = _claim(message_ids, adapter, now, report)
    except Exception as exc:  # the database refused (the task's retry policy decides what follows)
        events.claim_failed("send", exc)
        raise
    report.claimed = len(claimed.rows)
    tracing.current_links_add(r["trace_context"] for r in claimed.rows)  # each message's own trace
    tracing.current_attribute("smsgw.claimed", report.claimed)
    if not claimed.rows:
        return report
    items = _in_flight(adapter, claimed, slot_of, now)
    pipeline = inflight.flight(outcomes_apply)
    if not wait:
        pipeline.submit(adapter, items)
        return report
    for group in pipeline.submit_and_wait(adapter, items):
        outcomes_apply(group)
        for _, res in group:
            report.outcomes[res.error_class or res.outcome] += 1
    return report


@dataclass
class _Claimed:
    """A batch's claimed rows (CLAIM_RETURNING), their attempts, the validity period each is sent with, and
    the holds some of them probe."""

    rows: list[dict]
    attempts: list[Attempt]
    validity: dict[int, int]
    probes: dict[int, holds_service.OpenHold]


def _claim(message_ids: list[int], adapter: ProviderAdapter, now: datetime, report: BatchReport) -> _Claimed:
    """The checks right before the claim, then the claim and the attempts, in one transaction."""
    open_holds = holds_service.holds_open(adapter.name, adapter.account)
    if open_holds:
        # The per-process cache may be a second old, and another process may just have cleared the hold
        # and released its messages: parking them again on a stale view would hold them twice (and write
        # a second "held" entry). Holding is the rare path; it can afford a fresh read.
        open_holds = holds_service.holds_open(adapter.name, adapter.account, fresh=True)
    circuit_open = circuit.circuit_state(adapter.name, adapter.account).is_open
    host_open = host_circuit.host_state(adapter.name, adapter.account).is_open
    probes: dict[int, holds_service.OpenHold] = {}
    cancelled = 0
    with transaction.atomic():
        message_ids = _screen(message_ids, now, report)
        if open_holds or circuit_open or host_open:
            admission = admission_split(
                message_ids,
                adapter.name,
                open_holds,
                circuit_open,
                now,
                host=(adapter.name, adapter.account) if host_open else None,
            )
            stages.park_rows()(admission.parks, now)
            report.held = len(admission.parks)
            failovers = admission.failovers
            report.failed_over = len(failover.failover_rows(failovers, now=now)) if failovers else 0
            message_ids, probes = admission.allowed, admission.probes
        rows = _claim_rows(message_ids, adapter, probes, now)
        if len(rows) < len(message_ids):
            skipped = set(message_ids) - {r["id"] for r in rows}
            halted_skipped(skipped, now)
            cancelled = _cancelled_count(skipped)
        validity = {r["id"]: validity_period(r["expires_at"], now, adapter) for r in rows}
        # Committed with the claim, before any provider call: a crash from here on leaves evidence.
        attempts = attempts_start(rows, provider=adapter.name, started_at=now, validity=validity)
    if cancelled:  # committed
        events.cancel_race("send_found_cancelled", cancelled)
    return _Claimed(rows, attempts, validity, probes)


def _cancelled_count(skipped: set[int]) -> int:
    """Of the messages the claim left, those cancelled since they were queued (by their tenant, an operator
    or their campaign's cancel): cancellation races the cancel won. One primary-key read, and only for a
    batch the claim did not take whole (a duplicate task's rows are past `queued`, not cancelled)."""
    return Message.objects.filter(pk__in=skipped, status=Status.CANCELLED).count()


def _screen(message_ids: list[int], now: datetime, report: BatchReport) -> list[int]:
    """What is left of the batch once the messages whose validity passed have expired and the suppression
    list and the destination guards have stopped theirs."""
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
    return message_ids


def _claim_rows(
    message_ids: list[int], adapter: ProviderAdapter, probes: Mapping[int, object], now: datetime
) -> list[dict]:
    """The CAS that makes duplicate tasks harmless: a re-published or redelivered batch finds its rows
    already past `queued` and claims nothing. A disabled tenant's messages are not claimed (they wait in
    `queued`; the release step parks them until the tenant is enabled again). Nor is a paused or cancelled
    campaign's: the exclusion is in this statement, so once the pause commits no later claim can take one
    of its messages."""
    return transitions.transition_many(
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


def _in_flight(
    adapter: ProviderAdapter, claimed: _Claimed, slot_of: Mapping[int, float], now: datetime
) -> list[inflight.Pending]:
    """Each claimed message's submission, with its slot and what may still hold it back."""
    rows, attempts, validity = claimed.rows, claimed.attempts, claimed.validity
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
        return not circuit.seen_open(name, account) and not host_circuit.host_seen_open(name, account)

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
            sender_pool=r["sender_pool"],
            status_callback=adapter.status_callback_url(base, r["public_id"].removeprefix("msg_"), a.number),
            idempotency_token=a.idempotency_token,
            validity_period=validity[r["id"]],
            expires_at=r["expires_at"],  # the period sent is taken again as the request is written
            not_before=slots.get(r["id"], 0.0),
            reslot=late_hooks.ask(
                provider=adapter.name,
                account=adapter.account,
                message_id=r["id"],
                sender=r["from_number"] or r["sender_pool"],
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
    return [
        inflight.Pending(adapter, row, attempt, submission, claimed.probes.get(row["id"]))
        for row, attempt, submission in zip(rows, attempts, submissions, strict=True)
    ]


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
        [(r["id"], r["from_number"] or r["sender_pool"], r["segments"]) for r in late],
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
