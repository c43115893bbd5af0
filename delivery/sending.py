"""Send worker service: queued -> sending -> (sent | queued again | failed | uncertain), per batch.

One task carries a batch of ids, but every message keeps its own CAS, attempt row, retry schedule and
timeline. Two short transactions per batch (claim + attempts; outcomes) instead of several per SMS.

What happens after the provider answers is decided by the error class (``ErrorClass``), never by a
provider's codes:

* accepted -> ``sent``;
* throttled (429, a full sender queue) -> ``queued`` again after a backoff (Retry-After when given); the
  attempt is not charged, since the message did nothing wrong;
* transient -> ``queued`` with exponential backoff, charged (bounded by SMSGW_RETRY_MAX_ATTEMPTS);
* account fault -> the scope is held (delivery.holds) and the message waits in ``queued``, not charged;
* opted out -> ``failed`` with reason ``opted_out`` (and an OptOutSignal for the suppression list);
* permanent -> ``failed`` (dead letter);
* uncertain -> stays ``sending`` until the reconciler has asked the provider (delivery.reconcile).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from delivery import campaign_watch, circuit, inflight, pacing, screening, suppression
from delivery import holds as holds_service
from delivery.attempts import attempts_finish, attempts_start
from delivery.models import Attempt, AttemptOutcome, OptOutSignal
from delivery.providers import get_adapter
from delivery.providers.base import ErrorClass, ErrorInfo, Outcome, ProviderAdapter, Submission, SubmitResult
from delivery.retry import retry_decide
from scheduling import campaign_gate, release, transitions
from scheduling.models import Message, Status
from scheduling.reasons import ReasonCode
from scheduling.release import Park
from smsgw.models import Tenant
from smsgw.observability import events

log = logging.getLogger(__name__)

TENANT_TABLE = Tenant._meta.db_table
LATE_LOG_SECONDS = 0.05  # a paced batch this late at the worker is logged (the spacing is kept, shifted)
# Twilio's ValidityPeriod bounds ("integers from 1 to 36000", twilio-oai CreateMessageRequest).
VALIDITY_MIN, VALIDITY_MAX = 1, 36000

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
)

# Machine-readable reasons (Message.reason_code) set by the send worker.
REASON_THROTTLED = ReasonCode.PROVIDER_THROTTLED
REASON_RETRY = ReasonCode.PROVIDER_ERROR
REASON_REJECTED = ReasonCode.PROVIDER_REJECTED
REASON_OPTED_OUT = ReasonCode.OPTED_OUT
REASON_GAVE_UP = ReasonCode.RETRIES_EXHAUSTED
REASON_UNCERTAIN = ReasonCode.SUBMISSION_UNCERTAIN


@dataclass
class BatchReport:
    claimed: int = 0
    expired: int = 0
    held: int = 0
    opted_out: int = 0
    refused: int = 0  # destination refused at execution (delivery.guards)
    outcomes: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def validity_period(expires_at: datetime, now: datetime) -> int:
    """``clamp(expires_at - now, 1, 36000)`` seconds: nothing may leave the provider after it expired here."""
    seconds = math.ceil((expires_at - now).total_seconds())
    return min(max(seconds, VALIDITY_MIN), VALIDITY_MAX)


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

    Each answer is recorded as it arrives (delivery.inflight). ``wait=False`` (the send task) returns
    once the submissions are started, the process's recorder thread recording them; ``wait=True``
    records them here, in the caller's thread, and reports the outcomes."""
    report = BatchReport()
    adapter = get_adapter(provider)
    now = timezone.now()
    open_holds = holds_service.holds_open(adapter.name, adapter.account)
    if open_holds:
        # The per-process cache may be a second old, and another process may just have cleared the hold
        # and released its messages: parking them again on a stale view would hold them twice (and write
        # a second "held" entry). Holding is the rare path; it can afford a fresh read.
        open_holds = holds_service.holds_open(adapter.name, adapter.account, fresh=True)
    circuit_open = circuit.circuit_state(adapter.name, adapter.account).is_open
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
        # query, delivery.screening): a recipient who opted out after the message was accepted, or a
        # destination the tenant may no longer send to, is never submitted; the message ends cancelled.
        screened = screening.batch_screen(message_ids, now=now)
        stopped = screened.stopped
        if stopped:
            report.opted_out = len(screened.opted_out)
            report.refused = len(screened.refused)
            if not_before is not None and len(not_before) == len(message_ids):
                not_before = [
                    nb for mid, nb in zip(message_ids, not_before, strict=True) if mid not in stopped
                ]
            message_ids = [mid for mid in message_ids if mid not in stopped]
        if open_holds or circuit_open:
            message_ids, parks, probes = _admission_filter(message_ids, open_holds, circuit_open, now)
            release.park_rows(parks, now)
            report.held = len(parks)
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
        validity = {r["id"]: validity_period(r["expires_at"], now) for r in rows}
        # Committed with the claim, before any provider call: a crash from here on leaves evidence.
        attempts = attempts_start(rows, provider=adapter.name, started_at=now, validity=validity)
    report.claimed = len(rows)
    if not rows:
        return report

    base = settings.SMSGW_PUBLIC_BASE_URL
    slots = _slots(message_ids, not_before, time.time())  # measured now: the claim took its time too
    # A circuit probe always goes; anything else stays unsent if this process has meanwhile seen the
    # account's circuit open (it then waits for the provider like everything else, uncharged).
    probing = {r["id"] for r in rows if r["reason_code"] == circuit.REASON_PROBE}

    def wanted(name: str = adapter.name, account: str = adapter.account) -> bool:
        return not circuit.seen_open(name, account)

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
            not_before=slots.get(r["id"], 0.0),
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


def _slots(ids: list[int], not_before: list[float] | None, now: float) -> dict[int, float]:
    """Each paced message's submission instant. A batch that reaches the worker late keeps its spacing
    (shifted by the delay) rather than going out at once; and no wait is longer than a release can be
    ahead of its slot (a wrong clock never parks a worker)."""
    if not not_before or len(not_before) != len(ids):
        return {}
    paced = [slot for slot in not_before if slot > 0]  # 0: no slot, it goes at once
    if not paced:
        return {}
    late = max(0.0, now - min(paced))
    if late > LATE_LOG_SECONDS:
        log.info("paced batch reached the worker %.3f s after its first slot: shifted", late)
    longest = 2 * settings.PACING_RELEASE_AHEAD_SECONDS
    return {
        mid: min(slot + late, now + longest) for mid, slot in zip(ids, not_before, strict=True) if slot > 0
    }


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
    release.park_rows([(r, park) for r in rows if halted.get(r["campaign_id"]) == "paused"], now)
    campaign_gate.cancel_rows([r for r in rows if halted.get(r["campaign_id"]) == "cancelled"], now)


def provider_failure(res: SubmitResult) -> bool:
    """A failure that says the provider is unavailable (not the message's): a timeout, a connection
    error, a 5xx. These open the circuit and, while it is open, cost the message no attempt."""
    if res.outcome == Outcome.UNCERTAIN:
        return True
    if res.outcome != Outcome.TRANSIENT or res.error_class == ErrorClass.THROTTLED:
        return False
    return res.http_status is None or res.http_status >= 500 or res.http_status == 408


def _report_health(adapter: ProviderAdapter, rows: list[dict], results: list[SubmitResult]):
    """Tell the circuit breaker how the provider answered, and lower the rate of whatever it throttled
    (AIMD), before the outcomes are recorded (they depend on the circuit's state)."""
    failed = [r for r in results if r.sent and provider_failure(r)]
    answered = sum(1 for r in results if r.sent)
    probe_ok = any(
        row["reason_code"] == circuit.REASON_PROBE and not provider_failure(res)
        for row, res in zip(rows, results, strict=True)
    )
    state = circuit.circuit_report(
        provider=adapter.name,
        account=adapter.account,
        ok=answered - len(failed),
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


def _admission_filter(
    message_ids: list[int], open_holds: list[holds_service.OpenHold], circuit_open: bool, now: datetime
) -> tuple[list[int], list[tuple[dict, Park]], dict[int, holds_service.OpenHold]]:
    """Split a batch into what may be submitted and what must wait: everything but the probe while the
    account's circuit is open; what an open hold covers (a sender or destination hold whose probe is due
    lets exactly one of its messages through; account-wide holds are probed without a message)."""
    rows = Message.objects.filter(pk__in=message_ids, status=Status.QUEUED).values(
        "id", "version", "status", "to", "from_number", "messaging_service_sid", "reason_code", "expires_at"
    )
    allowed: list[int] = []
    parks: list[tuple[dict, Park]] = []
    probes: dict[int, holds_service.OpenHold] = {}
    probing: set[int] = set()
    for row in rows:
        if circuit_open and row["reason_code"] != circuit.REASON_PROBE:
            until = now + timedelta(seconds=settings.CIRCUIT_PARK_SECONDS)
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
        else:
            details = {"hold_id": hold.id, "scope": hold.scope, "error_code": hold.error_code}
            park = Park(hold.park_until(now), holds_service.REASON_HELD, hold.describe(), "held", details)
            parks.append((row, park))
    return allowed, parks, probes


def throttle_delay(*, uncharged_calls: int, retry_after: float | None = None) -> float:
    """Backoff after the provider throttled a message: exponential in the throttles it met so far, with
    jitter, never sooner than the provider's Retry-After (Twilio sends none with 20429)."""
    exponent = min(max(uncharged_calls, 0), 16)
    cap = min(settings.THROTTLE_MAX_DELAY_SECONDS, settings.THROTTLE_BASE_SECONDS * 2**exponent)
    delay = random.uniform(cap / 2, cap) if cap > 0 else 0.0
    return max(delay, retry_after or 0.0)


def _throttle_delay(row: dict, res: SubmitResult) -> float:
    # provider_calls - attempt_count: this message's earlier uncharged calls (throttles, holds)
    uncharged = row["provider_calls"] - row["attempt_count"]
    return throttle_delay(uncharged_calls=uncharged, retry_after=res.retry_after)


def _unavailable_delay(row: dict, res: SubmitResult) -> float:
    """Backoff after the provider failed for its own reasons: exponential (from SMSGW_RETRY_BASE_SECONDS,
    capped by SMSGW_RETRY_MAX_DELAY_SECONDS) in this message's earlier uncharged calls, full jitter, never
    sooner than a Retry-After."""
    uncharged = max(0, row["provider_calls"] - row["attempt_count"])
    cap = min(settings.RETRY_MAX_DELAY_SECONDS, settings.RETRY_BASE_SECONDS * 2 ** min(uncharged, 16))
    delay = random.uniform(cap / 2, cap) if cap > 0 else 0.0
    return max(delay, res.retry_after or 0.0)


def _reason(res: SubmitResult) -> str:
    title = f" ({res.error_title})" if res.error_title else ""
    return f"{res.http_status or 'network'} {res.error_code}{title} {res.error_message}".strip()[:200]


def outcomes_record(
    adapter: ProviderAdapter,
    rows: list[dict],
    attempts: list[Attempt],
    results: list[SubmitResult],
    *,
    provider_down: bool = False,
) -> None:
    """Record each answer. ``provider_down``: the account's circuit is open, so a failure of the
    provider's own (timeout, connection error, 5xx) waits for it without costing the message an attempt."""
    now = timezone.now()
    sent, uncertain = [], []
    # (kind, to_status) -> [(id, version, per-row values)]: every per-row value set names the same columns
    moves: dict[tuple[str, str], list[tuple[int, int, dict]]] = defaultdict(list)
    details: dict[int, dict] = {}
    opt_outs: list[OptOutSignal] = []
    for row, attempt, res in zip(rows, attempts, results, strict=True):
        attempt.finished_at = now
        attempt.http_status = res.http_status
        attempt.provider_code = res.error_code
        attempt.error_class = str(res.error_class or "")
        attempt.provider_message_id = res.provider_message_id
        attempt.latency_ms = res.latency_ms
        attempt.response = res.response
        mid, version = row["id"], row["version"]
        details[mid] = {"attempt": attempt.number, "error_code": res.error_code, "reason": _reason(res)}
        if not res.sent and not campaign_watch.running(row.get("campaign_id")):
            # Held back at its slot because its campaign was paused or cancelled meanwhile (or its state
            # could not be read): back to waiting, uncharged, and due at once. The release step decides
            # on the campaign's committed state (parked, cancelled or sent), so a resume in between
            # cannot leave it parked.
            attempt.outcome = AttemptOutcome.TRANSIENT_ERROR
            state = campaign_watch.state(row["campaign_id"])
            paused = state == "paused"
            at = min(now, row["expires_at"])
            moves[("campaign_paused", Status.QUEUED)].append(
                (
                    mid,
                    version,
                    {
                        "run_after": at,
                        "attempt_count": row["attempt_count"] - 1,
                        "error_code": "",
                        "reason_code": campaign_gate.REASON_PAUSED if paused else "",
                        "status_reason": campaign_gate.PAUSED_TEXT
                        if paused
                        else f"not sent: campaign {state}",
                    },
                )
            )
            details[mid] = {
                "attempt": attempt.number,
                "reason": "not sent: campaign halted",
                "charged": False,
            }
        elif res.outcome == Outcome.ACCEPTED:
            attempt.outcome = AttemptOutcome.ACCEPTED
            sent.append(
                (
                    mid,
                    version,
                    {"provider_message_id": res.provider_message_id, "provider_status": res.provider_status},
                )
            )
            details[mid] = {"provider_message_id": res.provider_message_id, "attempt": attempt.number}
        elif res.outcome == Outcome.UNCERTAIN:
            attempt.outcome = AttemptOutcome.UNCERTAIN
            uncertain.append((mid, version, {}))
        elif res.error_class == ErrorClass.THROTTLED:
            attempt.outcome = AttemptOutcome.THROTTLED
            at = min(now + timedelta(seconds=_throttle_delay(row, res)), row["expires_at"])
            moves[("throttled", Status.QUEUED)].append(
                (
                    mid,
                    version,
                    {
                        "run_after": at,
                        "attempt_count": row["attempt_count"] - 1,  # not charged
                        "error_code": res.error_code,
                        "reason_code": REASON_THROTTLED,
                        "status_reason": f"provider throttled: {_reason(res)}; resend at {at:%H:%M:%S}"[:255],
                    },
                )
            )
            details[mid]["retry_at"] = at.isoformat()
            details[mid]["charged"] = False
        elif res.error_class == ErrorClass.ACCOUNT_FAULT:
            attempt.outcome = AttemptOutcome.ACCOUNT_FAULT
            hold = holds_service.hold_open_for(
                provider=adapter.name,
                account=adapter.account,
                info=ErrorInfo(ErrorClass.ACCOUNT_FAULT, res.error_title or _reason(res), res.scope),
                error_code=res.error_code or str(res.http_status or ""),
                message=row,
                now=now,
            )
            moves[("held", Status.QUEUED)].append(
                (
                    mid,
                    version,
                    {
                        "run_after": hold.park_until(now),
                        "attempt_count": row["attempt_count"] - 1,  # not charged: not the message's fault
                        "error_code": res.error_code,
                        "reason_code": holds_service.REASON_HELD,
                        "status_reason": hold.describe(),
                    },
                )
            )
            details[mid].update({"hold_id": hold.id, "scope": hold.scope, "charged": False})
        elif provider_failure(res) and res.outcome == Outcome.TRANSIENT:
            # The provider is unavailable (5xx, a connection error, a timeout before sending), not the
            # message wrong: no attempt is charged, so an outage of any length ends a message only by
            # its validity. Backoff still grows with its earlier failures; while the circuit is open
            # it waits for the circuit to close instead.
            attempt.outcome = AttemptOutcome.TRANSIENT_ERROR
            if provider_down:
                kind, reason_code = "provider_unavailable", circuit.REASON_UNAVAILABLE
                until = now + timedelta(seconds=settings.CIRCUIT_PARK_SECONDS)
                text = f"provider unavailable (circuit open): {_reason(res)}"
            else:
                kind, reason_code = "retry_scheduled", REASON_RETRY
                until = now + timedelta(seconds=_unavailable_delay(row, res))
                text = f"provider unavailable: {_reason(res)}; retry at {until:%H:%M:%S}"
            moves[(kind, Status.QUEUED)].append(
                (
                    mid,
                    version,
                    {
                        "run_after": min(until, row["expires_at"]),
                        "attempt_count": row["attempt_count"] - 1,  # not the message's attempt
                        "error_code": res.error_code,
                        "reason_code": reason_code,
                        "status_reason": text[:255],
                    },
                )
            )
            details[mid].update({"charged": False, "retry_at": min(until, row["expires_at"]).isoformat()})
        elif res.outcome == Outcome.TRANSIENT:
            attempt.outcome = AttemptOutcome.TRANSIENT_ERROR
            decision = retry_decide(
                attempt_number=row["attempt_count"],
                now=now,
                first_due=row["due_at"],
                expires_at=row["expires_at"],
                retry_after=res.retry_after,
            )
            if decision.retry:
                moves[("retry_scheduled", Status.QUEUED)].append(
                    (
                        mid,
                        version,
                        {
                            "run_after": decision.run_after,
                            "error_code": res.error_code,
                            "reason_code": REASON_RETRY,
                            "status_reason": f"transient: {_reason(res)}; {decision.reason}"[:255],
                        },
                    )
                )
                details[mid]["retry_at"] = decision.run_after.isoformat()
            else:
                moves[("failed", Status.FAILED)].append(
                    (
                        mid,
                        version,
                        {
                            "error_code": res.error_code,
                            "reason_code": REASON_GAVE_UP,
                            "status_reason": f"{decision.reason}; last: {_reason(res)}"[:255],
                        },
                    )
                )
                details[mid]["dead_letter"] = True
        else:  # REJECTED: permanent, or the recipient opted out
            attempt.outcome = AttemptOutcome.REJECTED
            opted_out = res.error_class == ErrorClass.OPTED_OUT
            moves[("failed", Status.FAILED)].append(
                (
                    mid,
                    version,
                    {
                        "error_code": res.error_code,
                        "reason_code": REASON_OPTED_OUT if opted_out else REASON_REJECTED,
                        "status_reason": f"rejected by provider: {_reason(res)}"[:255],
                    },
                )
            )
            details[mid]["dead_letter"] = True
            if opted_out:
                opt_outs.append(
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

    with transaction.atomic():
        attempts_finish(attempts, finished_at=now)
        sent_ids = transitions.transition_versioned(
            sent,
            from_status=Status.SENDING,
            to_status=Status.SENT,
            kind="sent",
            per_row_columns=("provider_message_id", "provider_status"),
            set_fields={
                "run_after": None,
                "error_code": "",
                "status_reason": "",
                "reason_code": "",
            },
            details=details.get,
            now=now,
        )
        moved: dict[tuple[str, str], list[int]] = {}
        for (kind, to_status), items in moves.items():
            extra = {"run_after": None} if to_status == Status.FAILED else {}
            moved[(kind, to_status)] = transitions.transition_versioned(
                items,
                from_status=Status.SENDING,
                to_status=to_status,
                kind=kind,
                per_row_columns=tuple(items[0][2]),
                set_fields=extra,
                details=details.get,
                now=now,
            )
        transitions.transition_versioned(
            uncertain,
            from_status=Status.SENDING,
            to_status=Status.SENDING,
            kind="attempt_uncertain",
            set_fields={
                "run_after": now + timedelta(seconds=settings.RECONCILE_FIRST_LOOK_SECONDS),
                "reason_code": REASON_UNCERTAIN,
                "status_reason": "provider did not answer; will look the message up before any resend",
            },
            details=details.get,
            now=now,
        )
        if opt_outs:
            OptOutSignal.objects.bulk_create(opt_outs)
            suppression.from_provider_signals(opt_outs)
    _metrics_record(adapter, rows, results, sent_ids, moves, moved, now)
    failed = len(moves.get(("failed", Status.FAILED), []))
    if failed or uncertain:
        public = {r["id"]: r["public_id"] for r in rows}
        ids = [public[mid] for mid, _, _ in [*moves.get(("failed", Status.FAILED), []), *uncertain]]
        log.warning("send batch: %d failed, %d uncertain", failed, len(uncertain), extra={"message_ids": ids})


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
