"""Reconciling sends whose outcome is unknown (docs/twilio.md, "Uncertain submissions"): a retry only
when the provider provably does not have the message.

A `sending` message whose lease expired had an attempt that may or may not have reached the provider: the
worker died mid-call, the call timed out, or the provider answered without a guarantee that it did not
store the message (a 5xx: Twilio's page for 20500 warns that retrying a create after a 500 can send it
twice). Sending again blindly could deliver twice, so the provider is asked first:

* **by sid**, when one was stored. A found copy is the answer. A 404 proves nothing until the account
  itself answers (a wrong account SID or base URL also answers 404 for a message that exists): the
  Account resource is fetched; if it answers, the 404 is believed; if not, the account is held (an
  account fault) and nothing is resent until an operator fixes the configuration.
* **by listing** otherwise: every message the provider holds for the recipient (``To`` only, in any status,
  queued ones included), filtered here by sender or messaging service, by creation time (from the
  attempt's start, less clock skew, to the listing itself: a message stored late in an incident is still
  ours) and by body, compared exactly as Twilio stores it (its trial prefix and Smart Encoding, nothing
  else). A sid owned by another message, or by another attempt, is not ours. When more copies match than we
  have uncertain messages for that recipient and body, which one is ours cannot be told: the message is
  "found, ambiguous", recorded sent and never resent, for an operator to check.

A found copy counts as what it is: one the provider already failed or did not deliver is recorded under its
sid and its status goes through the receipt table at once (retry, fail or hold), not an hour later.

**When is "not found" proof of absence?** The Messages list may lag behind what the provider stored (Twilio
documents no freshness; its users report minutes, twilio-java#442). So a listing can only prove absence if
it was complete (never after an incomplete one) and made late enough that the message, had it been stored,
would be listed:

* nothing of the request can arrive after ``started_at + timeout`` (its socket was reset on abort and its
  retransmissions bounded by TCP_USER_TIMEOUT, delivery.providers.twilio.http);
* the provider may take SMSGW_RECONCILE_ABSENT_GRACE_SECONDS more to store it;
* and its list up to SMSGW_RECONCILE_LIST_LAG_SECONDS more to show it.

So absence is declared by a complete, empty listing made at or after ``started_at + timeout + grace +
list lag`` (rule ``list_lag_bound``): a resend waits at most that long (190 s by default). Earlier
listings, every ``grace`` seconds from SMSGW_RECONCILE_FIRST_LOOK_SECONDS after the attempt, can only find.
A signed status callback naming the attempt (``?m=&a=``) proves existence at any time (receipts.unknown).
A tenant may shorten the wait per message (``uncertain_wait_seconds``, a one-time code where late is
worse than a rare duplicate) down to SMSGW_RECONCILE_MIN_WAIT_SECONDS, never below ``timeout + grace``
(rule ``tenant_wait``). After a database restore, the fence's attempts (delivery.sending.fence) count these
bounds from the fence instead of their start (rule ``restore_fence``). The timeline names the rule that
released each resend.

Each verdict is a move of the outcome tables (delivery.outcomes.table), made in delivery.sending.verdicts.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import cast

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from delivery.models import Attempt
from delivery.providers import ProviderQueryError, get_adapter
from delivery.providers.base import LOOKUP_SOURCE, CallbackData, ProviderAdapter, ProviderMessage
from delivery.sending import verdicts
from delivery.sending.fence import fenced_at
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status
from smsgw import stages, tracing

log = logging.getLogger(__name__)

# Verdicts that needed an answer from the provider (a probe of its open circuit that succeeded).
ANSWERED = frozenset({"found", "ambiguous", "absent", "absent_once"})

# Provider clocks and ours differ; widen the creation window by this much on both sides.
CLOCK_SKEW = timedelta(seconds=120)


def reconcile_many(message_ids: list[int], *, budget_seconds: float | None = None) -> dict[str, int]:
    """One reconcile task's work, bounded: it stops after ``budget_seconds`` (SMSGW_RECONCILE_TASK_SECONDS),
    and skips the messages of a provider account whose circuit is open (a look-up would only wait on the
    outage). Only the account's: a host circuit (one sending host cut off while others reach the
    provider, delivery.flow.circuit) never holds reconciliation back. What it leaves stays `sending` with
    its lease extended, and the sweep hands it over again when the lease runs out: nothing is lost, and no
    task holds a process through an outage."""
    from delivery.flow import circuit

    budget = settings.RECONCILE_TASK_SECONDS if budget_seconds is None else budget_seconds
    deadline = time.monotonic() + budget
    outcome: dict[str, int] = {}
    open_accounts: dict[tuple[str, str], bool] = {}
    # One read for the batch: while a circuit is open a whole batch is skipped in milliseconds, so skipped
    # batches never crowd the queue the circuit's own probe task runs on.
    providers = dict(Message.objects.filter(pk__in=message_ids).values_list("pk", "provider"))
    for index, message_id in enumerate(message_ids):
        if time.monotonic() >= deadline:
            outcome["left_for_later"] = len(message_ids) - index
            break
        provider = providers.get(message_id)
        if provider is None:
            continue
        adapter = get_adapter(provider or None)
        key = (adapter.name, adapter.account)
        probing = False
        if key not in open_accounts:
            open_accounts[key] = circuit.circuit_state(*key).is_open
            # An open circuit whose probe is due is probed by this look-up: with routes, nothing may wait
            # for the provider to be sent as the probe (it failed over), while uncertain messages do wait
            # for it; and this task runs whenever they do.
            probing = open_accounts[key] and circuit.probe_take(*key)
        if open_accounts[key] and not probing:
            outcome["circuit_open"] = outcome.get("circuit_open", 0) + 1
            continue
        result = message_reconcile(message_id)
        outcome[result] = outcome.get(result, 0) + 1
        if result == "lookup_failed":  # the provider is failing: the rest of this account waits too
            open_accounts[key] = True
        elif probing and result in ANSWERED:  # the provider answered: the circuit closes, the rest goes on
            circuit.circuit_report(provider=key[0], account=key[1], ok=1, failed=0, probe_ok=True)
            open_accounts[key] = False
            outcome["probe_closed"] = 1
    if outcome.get("left_for_later") or outcome.get("circuit_open"):
        log.info("reconcile: %s", outcome)
    return outcome


def message_reconcile(message_id: int) -> str:
    """Returns what was decided: "found", "ambiguous", "absent", "absent_once", "held", "inconclusive",
    "not_sending" or "lookup_failed"."""
    msg = Message.objects.filter(pk=message_id).first()
    if msg is None or msg.status != Status.SENDING:
        return "not_sending"
    adapter = get_adapter(msg.provider or None)
    attempt = msg.attempts.order_by("-number").first()
    now = timezone.now()
    try:
        # What the provider can be asked (its capabilities): a fetch by the attempt's id, a listing by
        # recipient; with neither, absence can never be proven here and the message waits (never resent).
        can = adapter.capabilities
        if attempt is not None and attempt.provider_message_id and can.fetch_by_id:
            return _by_sid(msg, attempt, adapter, now)
        if can.lookup_by_recipient:
            return _by_listing(msg, attempt, adapter, now)
        return verdicts.inconclusive(
            msg, {"method": "none", "reason": "the provider can be asked neither way"}, now
        )
    except ProviderQueryError as exc:  # the provider is down or erroring: stay `sending`, the lease returns
        log.warning(
            "reconcile: provider look-up failed for message %s: %s",
            msg.public_id,
            exc,
            extra=tracing.log_fields(msg.public_id, msg.trace_context),
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
    lookup: dict = {"method": "fetch", "provider_message_id": attempt.provider_message_id}
    if found is not None:
        return _found(msg, attempt, found, lookup, now, source="fetch", adapter=adapter)
    # A 404 proves nothing until the account itself answers: a wrong account SID or base URL answers 404
    # for a message that exists.
    answers, detail = adapter.account_answers()
    lookup["account_check"] = detail
    if not answers:
        return verdicts.held(msg, adapter, lookup, now, detail)
    return verdicts.absent(
        msg,
        attempt,
        lookup,
        now,
        rule=RULE_FETCH_404,
        why="the provider answered 404 for the attempt's sid, and the account itself answered (so the "
        "account SID and base URL are right): it does not have the message",
    )


def _by_listing(msg: Message, attempt: Attempt | None, adapter: ProviderAdapter, now: datetime) -> str:
    started = attempt.started_at if attempt else (msg.sending_at or msg.created_at)
    result = adapter.find_submissions(
        to=msg.to,
        sender=msg.from_number,
        sender_pool=msg.sender_pool,
        created_after=started - CLOCK_SKEW,
        created_before=now + CLOCK_SKEW,  # stored late in the same incident is still ours
    )
    matching = [c for c in result.candidates if adapter.body_matches(msg.body, c.body)]
    owned = _owned_elsewhere(msg, attempt, adapter.name, [c.provider_message_id for c in matching])
    free = sorted(
        (c for c in matching if c.provider_message_id not in owned),
        key=lambda c: c.date_created or now,
    )
    lookup: dict = {
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
        alike = _uncertain_alike(msg)
        lookup["uncertain_messages_alike"] = alike
        if len(free) > alike:
            return verdicts.ambiguous(msg, attempt, free, lookup, now)
        return _found(msg, attempt, free[0], lookup, now, source="list", adapter=adapter)
    if not result.complete:
        return verdicts.inconclusive(msg, lookup, now)
    if attempt is None:
        return verdicts.absent(
            msg,
            None,
            lookup,
            now,
            rule=RULE_NO_ATTEMPT,
            why="no attempt was ever recorded and the provider has none",
        )
    rule, release_at = absence_release(msg, attempt, adapter.request_timeout)
    lookup["absent_from"] = release_at.isoformat()
    if now < release_at:
        grace = timedelta(seconds=settings.RECONCILE_ABSENT_GRACE_SECONDS)
        return verdicts.absent_once(msg, attempt, lookup, now, min(now + grace, release_at))
    first = attempt.lookup_absent_at or now
    if rule == RULE_TENANT_WAIT:
        why = (
            f"complete listings from {first.isoformat()} to now found no submission, and the tenant's wait "
            f"for "
            f"this message ({msg.uncertain_wait_seconds} s) has passed; nothing of the attempt can still "
            f"reach the provider (connection reset, retransmissions stopped after the request timeout)"
        )
    elif rule == RULE_RESTORE_FENCE:
        why = (
            f"restored from a backup: a complete listing from {(started - CLOCK_SKEW).isoformat()}, made "
            f"past the restore fence's request timeout, grace and list-lag bound "
            f"({settings.RECONCILE_LIST_LAG_SECONDS} s), found no submission since the backup"
        )
    else:
        why = (
            f"a complete listing {int((now - started).total_seconds())} s after the attempt began found no "
            f"submission: past the request timeout, the provider's processing grace and the list's lag bound "
            f"({settings.RECONCILE_LIST_LAG_SECONDS} s), a stored copy would be listed"
        )
    return verdicts.absent(msg, attempt, lookup, now, rule=rule, why=why)


# Which rule released a resend (the `reconciled_absent` entry's details.rule).
RULE_LIST_LAG = "list_lag_bound"
RULE_TENANT_WAIT = "tenant_wait"
RULE_FETCH_404 = "fetch_404_account_ok"
RULE_NO_ATTEMPT = "no_attempt"
RULE_RESTORE_FENCE = "restore_fence"


def absence_release(msg: Message, attempt: Attempt, timeout_seconds: float) -> tuple[str, datetime]:
    """(rule, the earliest time a complete empty listing proves absence) for an uncertain attempt: the
    list-lag bound, or the tenant's shorter wait for this message (never before the request timeout plus
    the processing grace, and never below SMSGW_RECONCILE_MIN_WAIT_SECONDS).

    An attempt a restore fence made uncertain (delivery.sending.fence) stands for submissions the lost
    history may have made at any time up to when it stopped, which is before the fence but may be just
    before: its bounds count from the fence, not from the attempt's start (rule ``restore_fence``)."""
    fence = fenced_at(attempt)
    start = max(attempt.started_at, fence) if fence else attempt.started_at
    settled = start + timedelta(seconds=timeout_seconds + settings.RECONCILE_ABSENT_GRACE_SECONDS)
    bound = settled + timedelta(seconds=settings.RECONCILE_LIST_LAG_SECONDS)
    wait = msg.uncertain_wait_seconds
    if wait:
        tenant = max(start + timedelta(seconds=max(wait, settings.RECONCILE_MIN_WAIT_SECONDS)), settled)
        if tenant < bound:
            return RULE_TENANT_WAIT, tenant
    return (RULE_RESTORE_FENCE if fence else RULE_LIST_LAG), bound


def _owned_elsewhere(msg: Message, attempt: Attempt | None, provider: str, sids: list[str]) -> set[str]:
    """Sids already belonging to another message (the same text sent twice to one number) or to another
    attempt, of another message or of this one (an earlier copy the provider failed, say): those are not
    this attempt's submission."""
    if not sids:
        return set()
    owned = set(
        Message.objects.filter(provider=provider, provider_message_id__in=sids)
        .exclude(pk=msg.pk)
        .values_list("provider_message_id", flat=True)
    )
    others = Attempt.objects.filter(provider=provider, provider_message_id__in=sids)
    if attempt is not None:
        others = others.exclude(pk=attempt.pk)
    owned |= set(others.values_list("provider_message_id", flat=True))
    # provider_message_id__in=sids matches no NULL, which the stubs' row type (str | None) cannot know.
    return cast("set[str]", owned)


def _uncertain_alike(msg: Message) -> int:
    """Our messages (this one included) still uncertain at this provider for the same recipient and body,
    with no sid yet: each may own one of the matching copies."""
    return (
        Message.objects.filter(provider=msg.provider, to=msg.to, status=Status.SENDING, body=msg.body)
        .filter(Q(provider_message_id__isnull=True) | Q(provider_message_id=""))
        .count()
    )


def _found(
    msg: Message,
    attempt: Attempt | None,
    found: ProviderMessage,
    lookup: dict,
    now: datetime,
    *,
    source: str,
    adapter: ProviderAdapter,
) -> str:
    # Twilio's date_created has whole seconds and may precede our attempt's start by clock skew: the
    # later of the two, so no timeline shows a send before its attempt.
    sent_at = max(d for d in (found.date_created, attempt.started_at if attempt else None, msg.due_at) if d)
    normalized = adapter.normalize_status(found.status)
    failed = normalized in ("failed", "undelivered")
    won = verdicts.found_record(
        msg,
        attempt,
        provider_message_id=found.provider_message_id,
        provider_status=found.status,
        sent_at=sent_at,
        details={
            "source": source,
            "lookup": lookup,
            "decision": (
                "the provider has this submission but already reports it "
                f"{found.status} ({found.error_code or 'no error code'}): its status goes through the "
                "receipt table now"
                if failed
                else "the provider has this submission: recorded as sent, not sent again"
            ),
        },
        now=now,
    )
    if won and normalized:
        # What the provider says of its copy is applied as a receipt at once (retry, fail or hold by the
        # error table; a delivered copy completes the message), not at the hourly status look-up. Through
        # the same intake as a provider's callback (smsgw.stages: delivery never imports receipts).
        stages.receipt_intake()(
            provider=adapter.name,
            callback=CallbackData(
                provider_message_id=found.provider_message_id,
                raw_status=found.status,
                normalized_status=normalized,
                error_code=found.error_code,
                payload={"source": LOOKUP_SOURCE, **adapter.status_payload(found)},
            ),
        )
    return "found" if won else "not_sending"
