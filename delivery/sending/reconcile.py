"""Reconciling sends whose outcome is unknown (docs/architecture.md, "Uncertain submissions"): a retry
only when the provider cannot have it.

A `sending` message whose lease expired had an attempt that may or may not have reached the provider:
the worker died mid-call, or the call timed out. Sending again blindly could deliver twice, so the
provider is asked first:

* **by sid**, when one was stored: the provider's answer is authoritative both ways (a 404 is Twilio
  positively saying the message does not exist);
* **by listing** otherwise: every message the provider holds for the recipient (``To`` only, in any
  status, queued ones included), filtered here by sender or messaging service, by a creation window
  around the attempt and by body (tolerating the provider's rewrites, such as a trial-account prefix).
  A sid already owned by another message, or by another attempt, is not ours.

When is "not found" proof of absence? A listing can only miss a message that reached the provider if
(a) the listing was cut short (page bound), or (b) the request was still on its way, or still being
processed, when we looked. So absence is declared only when all of these hold:

1. the listing was complete (never after an incomplete one);
2. nothing of the request can still arrive: its socket was reset on abort and its retransmissions
   bounded by TCP_USER_TIMEOUT = the request timeout (delivery.providers.twilio.http), so no byte of it
   can leave after ``started_at + timeout``;
3. a second complete listing, SMSGW_RECONCILE_ABSENT_GRACE_SECONDS after the first found nothing,
   still finds nothing (it outlasts the provider's processing and listing lag).

Only then is a retry safe; the timeline records what was looked up, twice, and why. A provider that
does have the message (queued for hours behind a slow sender, say) shows it in the listing, and it is
recorded as sent, never sent again.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import cast

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from delivery.models import Attempt, AttemptOutcome
from delivery.providers import ProviderQueryError, get_adapter
from delivery.providers.base import ProviderAdapter, ProviderMessage
from delivery.sending.delays import retry_decide
from scheduling.lifecycle import transitions
from scheduling.lifecycle.reasons import ReasonCode
from scheduling.models import Message, Status

log = logging.getLogger(__name__)

# Provider clocks and ours differ; widen the creation window by this much on both sides.
CLOCK_SKEW = timedelta(seconds=120)


def reconcile_many(message_ids: list[int], *, budget_seconds: float | None = None) -> dict[str, int]:
    """One reconcile task's work, bounded: it stops after ``budget_seconds`` (SMSGW_RECONCILE_TASK_SECONDS),
    and skips the messages of a provider account whose circuit is open (a look-up would only wait on the
    outage). What it leaves stays `sending` with its lease extended, and the sweep hands it over again
    when the lease runs out: nothing is lost, and no task holds a process through an outage."""
    from delivery.flow import circuit

    budget = settings.RECONCILE_TASK_SECONDS if budget_seconds is None else budget_seconds
    deadline = time.monotonic() + budget
    outcome: dict[str, int] = {}
    open_accounts: dict[tuple[str, str], bool] = {}
    for index, message_id in enumerate(message_ids):
        if time.monotonic() >= deadline:
            outcome["left_for_later"] = len(message_ids) - index
            break
        provider = Message.objects.filter(pk=message_id).values_list("provider", flat=True).first()
        if provider is None:
            continue
        adapter = get_adapter(provider or None)
        key = (adapter.name, adapter.account)
        if key not in open_accounts:
            open_accounts[key] = circuit.circuit_state(*key).is_open
        if open_accounts[key]:
            outcome["circuit_open"] = outcome.get("circuit_open", 0) + 1
            continue
        result = message_reconcile(message_id)
        outcome[result] = outcome.get(result, 0) + 1
        if result == "lookup_failed":  # the provider is failing: the rest of this account waits too
            open_accounts[key] = True
    if outcome.get("left_for_later") or outcome.get("circuit_open"):
        log.info("reconcile: %s", outcome)
    return outcome


def message_reconcile(message_id: int) -> str:
    """Returns what was decided: "found", "absent", "absent_once", "inconclusive", "not_sending" or
    "lookup_failed"."""
    msg = Message.objects.filter(pk=message_id).first()
    if msg is None or msg.status != Status.SENDING:
        return "not_sending"
    adapter = get_adapter(msg.provider or None)
    attempt = msg.attempts.order_by("-number").first()
    now = timezone.now()
    try:
        if attempt is not None and attempt.provider_message_id:
            return _by_sid(msg, attempt, adapter, now)
        return _by_listing(msg, attempt, adapter, now)
    except ProviderQueryError as exc:  # the provider is down or erroring: stay `sending`, the lease returns
        log.warning(
            "reconcile: provider look-up failed for message %s: %s",
            msg.public_id,
            exc,
            extra={"message_id": msg.public_id},
        )
        transitions.event_record(
            msg.pk,
            kind="reconcile_deferred",
            status=msg.status,
            details={"reason": "provider look-up failed; will retry", "error": str(exc)[:200]},
        )
        return "lookup_failed"


def _by_sid(msg: Message, attempt: Attempt, adapter: ProviderAdapter, now: datetime) -> str:
    found = adapter.fetch(attempt.provider_message_id)
    lookup = {"method": "fetch", "provider_message_id": attempt.provider_message_id}
    if found is not None:
        return _found(msg, attempt, found, lookup, now)
    # A 404 is the provider positively saying it has no such message: no grace window is needed.
    return _absent(msg, attempt, lookup, now, why="the provider answered 404 for the attempt's sid")


def _by_listing(msg: Message, attempt: Attempt | None, adapter: ProviderAdapter, now: datetime) -> str:
    started = attempt.started_at if attempt else (msg.sending_at or msg.created_at)
    timeout = timedelta(seconds=adapter.request_timeout)
    result = adapter.find_submissions(
        to=msg.to,
        sender=msg.from_number,
        sender_pool=msg.messaging_service_sid,
        created_after=started - CLOCK_SKEW,
        created_before=started + timeout + CLOCK_SKEW,
    )
    matching = [c for c in result.candidates if adapter.body_matches(msg.body, c.body)]
    owned = _owned_elsewhere(msg, adapter.name, [c.provider_message_id for c in matching])
    free = sorted(
        (c for c in matching if c.provider_message_id not in owned),
        key=lambda c: c.date_created or now,
    )
    lookup = {
        "method": "list",
        **result.query,
        "pages": result.pages,
        "scanned": result.scanned,
        "complete": result.complete,
        "in_window": len(result.candidates),
        "body_matches": len(matching),
        "owned_by_other_messages": len(owned),
    }
    if free:
        return _found(msg, attempt, free[0], lookup, now)
    if not result.complete:
        return _inconclusive(msg, lookup, now)
    if attempt is None:
        return _absent(msg, None, lookup, now, why="no attempt was ever recorded and the provider has none")
    grace = timedelta(seconds=settings.RECONCILE_ABSENT_GRACE_SECONDS)
    earliest = attempt.started_at + timeout + grace  # no byte of the attempt can arrive after this
    first = attempt.lookup_absent_at
    if first is None or now < first + grace or now < earliest:
        return _absent_once(msg, attempt, lookup, now, first or now, max(now + grace, earliest))
    why = (
        f"two complete listings {int((now - first).total_seconds())} s apart found no submission; the "
        f"attempt's connection was reset when abandoned and its retransmissions stopped "
        f"{int(timeout.total_seconds())} s after it began, so nothing of it can still reach the provider"
    )
    return _absent(msg, attempt, lookup, now, why=why)


def _owned_elsewhere(msg: Message, provider: str, sids: list[str]) -> set[str]:
    """Sids already belonging to another message (the same text sent twice to one number) or to another
    attempt: those are not this attempt's submission."""
    if not sids:
        return set()
    owned = set(
        Message.objects.filter(provider=provider, provider_message_id__in=sids)
        .exclude(pk=msg.pk)
        .values_list("provider_message_id", flat=True)
    )
    owned |= set(
        Attempt.objects.filter(provider=provider, provider_message_id__in=sids)
        .exclude(message_id=msg.pk)
        .values_list("provider_message_id", flat=True)
    )
    # provider_message_id__in=sids matches no NULL, which the stubs' row type (str | None) cannot know.
    return cast("set[str]", owned)


def _found(msg: Message, attempt: Attempt | None, found: ProviderMessage, lookup: dict, now: datetime) -> str:
    # Twilio's date_created has whole seconds and may precede our attempt's start by clock skew: the
    # later of the two, so no timeline shows a send before its attempt.
    sent_at = max(d for d in (found.date_created, attempt.started_at if attempt else None, msg.due_at) if d)
    with transaction.atomic():
        result = transitions.transition(
            msg.pk,
            from_statuses=[Status.SENDING],
            to_status=Status.SENT,
            kind="reconciled_found",
            expected_version=msg.version,
            details={
                "provider_message_id": found.provider_message_id,
                "provider_status": found.status,
                "lookup": lookup,
                "decision": "the provider has this submission: recorded as sent, not sent again",
            },
            set_fields={
                "provider_message_id": found.provider_message_id,
                "provider_status": found.status,
                "sent_at": sent_at,
                "run_after": None,
                "status_reason": "",
                "reason_code": "",
            },
            now=now,
        )
        if result.won and attempt:
            Attempt.objects.filter(pk=attempt.pk).update(
                outcome=AttemptOutcome.RECONCILED_FOUND,
                provider_message_id=found.provider_message_id,
                finished_at=attempt.finished_at or now,
            )
    return "found" if result.won else "not_sending"


def _inconclusive(msg: Message, lookup: dict, now: datetime) -> str:
    """The listing hit its page bound: absence cannot be proven. Wait (another look at the next lease
    expiry); once the validity has passed, the message can no longer be sent anyway: it fails, saying
    that it may or may not have been sent, instead of risking a second copy."""
    if now >= msg.expires_at:
        transitions.transition(
            msg.pk,
            from_statuses=[Status.SENDING],
            to_status=Status.FAILED,
            kind="failed",
            expected_version=msg.version,
            details={"dead_letter": True, "lookup": lookup, "reason": "validity passed while uncertain"},
            set_fields={
                "run_after": None,
                "reason_code": ReasonCode.UNCERTAIN_EXPIRED,
                "status_reason": "validity passed before the provider could be shown not to have it",
            },
            now=now,
        )
        return "inconclusive"
    transitions.event_record(
        msg.pk,
        kind="reconcile_inconclusive",
        status=msg.status,
        details={"lookup": lookup, "decision": "listing incomplete: not resending; will look again"},
    )
    return "inconclusive"


def _absent_once(
    msg: Message, attempt: Attempt, lookup: dict, now: datetime, first: datetime, again_at: datetime
) -> str:
    with transaction.atomic():
        result = transitions.transition(
            msg.pk,
            from_statuses=[Status.SENDING],
            to_status=Status.SENDING,
            kind="reconcile_absent_once",
            expected_version=msg.version,
            details={
                "lookup": lookup,
                "decision": "not found yet; looking again before any resend",
                "look_again_at": again_at.isoformat(),
            },
            set_fields={"run_after": again_at},
            now=now,
        )
        if result.won and attempt.lookup_absent_at is None:
            Attempt.objects.filter(pk=attempt.pk).update(lookup_absent_at=first)
    return "absent_once" if result.won else "not_sending"


def _absent(msg: Message, attempt: Attempt | None, lookup: dict, now: datetime, *, why: str) -> str:
    # The provider never got it: like a connection that failed, not the message's attempt (uncharged;
    # only its validity and the retry window can end it).
    uncharged = max(0, msg.attempt_count - 1)
    decision = retry_decide(
        attempt_number=uncharged,
        now=now,
        first_due=msg.due_at,
        expires_at=msg.expires_at,
    )
    with transaction.atomic():
        if decision.retry:
            # Retry immediately (the backoff already ran as the lease and the grace window).
            result = transitions.transition(
                msg.pk,
                from_statuses=[Status.SENDING],
                to_status=Status.QUEUED,
                kind="reconciled_absent",
                expected_version=msg.version,
                details={"lookup": lookup, "decision": "retry is safe", "why": why},
                set_fields={
                    "run_after": now,
                    "attempt_count": uncharged,
                    "reason_code": "",
                    "status_reason": "reconciled: not at provider, retrying",
                },
                now=now,
            )
        else:
            result = transitions.transition(
                msg.pk,
                from_statuses=[Status.SENDING],
                to_status=Status.FAILED,
                kind="failed",
                expected_version=msg.version,
                details={"dead_letter": True, "reason": decision.reason, "lookup": lookup, "why": why},
                set_fields={
                    "run_after": None,
                    "reason_code": ReasonCode.RETRIES_EXHAUSTED,
                    "status_reason": decision.reason,
                },
                now=now,
            )
        if result.won and attempt:
            Attempt.objects.filter(pk=attempt.pk).update(
                outcome=AttemptOutcome.RECONCILED_ABSENT, finished_at=attempt.finished_at or now
            )
    return "absent" if result.won else "not_sending"
