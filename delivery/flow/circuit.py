"""Circuit breaker per provider account: an outage costs one probe per second, never the messages.

Send workers report each batch's answers (``circuit_report``): requests that failed for the provider's
reasons (timeouts, connection errors, 5xx) against those it answered. Within a fixed window of
SMSGW_CIRCUIT_WINDOW_SECONDS, at least SMSGW_CIRCUIT_MIN_FAILURES failures making at least
SMSGW_CIRCUIT_FAILURE_RATIO of the answers open the circuit; so do SMSGW_CIRCUIT_STREAK_FAILURES failures in a
row (an outage trips it after a few requests, not once failures outnumber a window of earlier
successes). While it is open:

* the release gate submits nothing but one probe message per SMSGW_CIRCUIT_PROBE_SECONDS (``probe_take``,
  a compare-and-set, so one sweeper on one host sends it);
* due messages wait where they are, reason ``provider_unavailable`` (one timeline entry each), and workers
  park what was already queued instead of submitting it;
* a message whose request failed because of the outage is not charged an attempt: an outage of any
  length ends a message only by its validity running out.

The first probe that gets an answer closes the circuit and releases every waiting message at once, so
sending resumes within about a probe interval of the provider's recovery. Its state is in the admin
(Provider circuits), the tenant API (``GET /v1/capacity``) and the affected messages' timelines.

**A provider that fails, or a host that cannot reach it.** A failed request either got an answer (a 5xx,
an unreadable answer: the provider is failing, every host should back off) or none at all (connection
refused or timed out, a read timeout, a reset before any answer: ``unanswered``). Answers feed the
account's circuit as above. Unanswered failures feed the account's circuit only when no other host got
an answer from that provider account within SMSGW_CIRCUIT_WINDOW_SECONDS (every host that tried cannot
reach it: probably the provider). When another host did, they are this host's own and feed its host
circuit (delivery.flow.host_circuit: ``host_report``, a ``ProviderHostCircuit`` row per (provider,
account, host), host = SMSGW_HOST_ID or the hostname, shared by the host's processes), opened by the same
thresholds. While a host circuit is open, that host's workers park their batches for
SMSGW_HOST_CIRCUIT_PARK_SECONDS, uncharged, reason ``host_unreachable`` (another host's worker takes them
when they are released again), and send one probe message after SMSGW_HOST_CIRCUIT_PROBE_SECONDS, the wait
doubling after each probe that got no answer (up to SMSGW_HOST_CIRCUIT_PROBE_MAX_SECONDS). Any answer to a
request this host started after the circuit opened closes it. The account's circuit, and so reconciliation
(which waits only for the account's), never opens because one host is cut off.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from delivery.models import ProviderCircuit
from scheduling.lifecycle import transitions
from scheduling.lifecycle.reasons import ReasonCode
from scheduling.models import Message, Status

log = logging.getLogger(__name__)

CLOSED, OPEN = "closed", "open"
OK_FLUSH_SECONDS = 0.5
_ok_buffer: dict[tuple[int, str, str], list] = {}  # per process: successes not yet counted in the window
REASON_UNAVAILABLE = ReasonCode.PROVIDER_UNAVAILABLE
REASON_PROBE = ReasonCode.CIRCUIT_PROBE
REASON_HOST = ReasonCode.HOST_UNREACHABLE
RELEASE_BATCH = 2000


@dataclass(frozen=True)
class CircuitState:
    state: str
    opened_at: datetime | None = None
    next_probe_at: datetime | None = None
    last_error: str = ""

    @property
    def is_open(self) -> bool:
        return self.state == OPEN


# What circuit_report answers for successes it only buffered: nothing was read, and nothing that depends
# on the state (a failure's outcome) is in such a group.
_CLOSED_UNREAD = CircuitState(CLOSED)


def _row(provider: str, account: str, now: datetime) -> ProviderCircuit:
    row = ProviderCircuit.objects.filter(provider=provider, account=account).first()
    if row is not None:
        return row
    try:
        with transaction.atomic():
            return ProviderCircuit.objects.create(
                provider=provider, account=account, state=CLOSED, window_started_at=now, updated_at=now
            )
    except IntegrityError:
        return ProviderCircuit.objects.get(provider=provider, account=account)


def circuit_state(provider: str, account: str) -> CircuitState:
    row = ProviderCircuit.objects.filter(provider=provider, account=account).first()
    if row is None:
        _local[(os.getpid(), provider, account)] = False
        return CircuitState(CLOSED)
    _local[(os.getpid(), provider, account)] = row.state == OPEN
    return CircuitState(row.state, row.opened_at, row.next_probe_at, row.last_error)


# This process's last view of each circuit (from the database, or from its own report). Submissions a
# worker already holds check it just before they go (``seen_open``): when the circuit opens, what this
# process has not sent yet stays unsent, instead of meeting the outage one request at a time.
_local: dict[tuple[int, str, str], bool] = {}


def seen_open(provider: str, account: str) -> bool:
    return _local.get((os.getpid(), provider, account), False)


def probe_take(provider: str, account: str, *, now: datetime | None = None) -> bool:
    """Claim the open circuit's due probe: exactly one caller wins it and sends one message."""
    now = now or timezone.now()
    row = ProviderCircuit.objects.filter(provider=provider, account=account, state=OPEN).first()
    if row is None or (row.next_probe_at and row.next_probe_at > now):
        return False
    won = ProviderCircuit.objects.filter(pk=row.pk, state=OPEN, next_probe_at=row.next_probe_at).update(
        next_probe_at=now + timedelta(seconds=settings.CIRCUIT_PROBE_SECONDS), probes=row.probes + 1
    )
    return won == 1


def circuit_report(
    *,
    provider: str,
    account: str,
    ok: int,
    failed: int,
    error: str = "",
    probe_ok: bool = False,
    now: datetime | None = None,
) -> CircuitState:
    """Count a batch's answers; open the circuit, or close it when a probe got an answer. Returns the
    state after the report. (While open, other answers are late ones from requests sent before it
    opened: they prove nothing about now.)"""
    now = now or timezone.now()
    if not ok and not failed:
        return circuit_state(provider, account)
    key = (os.getpid(), provider, account)
    # Answers only count against failures within the window: a process adds up its successes and reports
    # them at most every OK_FLUSH_SECONDS (or with its next failure), instead of locking the account's
    # circuit row for every small group of answers.
    total = ok_take(_ok_buffer, key, ok, hold=not failed and not probe_ok)
    if total is None:
        return _CLOSED_UNREAD
    ok = total
    row = _row(provider, account, now)
    closed = False
    with transaction.atomic():
        row = ProviderCircuit.objects.select_for_update().get(pk=row.pk)
        if row.state == OPEN:
            if probe_ok:  # the provider answers again: close, and release everything that waited
                _close(row, now)
                closed = True
            else:
                row.last_error = (error or row.last_error)[:255]
                row.updated_at = now
                row.save(update_fields=["last_error", "updated_at"])
        else:
            _count(row, ok, failed, error, now)
    _local[key] = row.state == OPEN
    if closed:
        circuit_release(provider=provider, now=timezone.now())  # outside the row lock: many messages
        return CircuitState(CLOSED)
    return CircuitState(row.state, row.opened_at, row.next_probe_at, row.last_error)


def ok_take(buffer: dict, key: tuple, ok: int, *, hold: bool) -> int | None:
    """This process's buffered successes for ``key`` plus ``ok``, to be written now; or None, kept in
    the buffer, when ``hold`` (only successes to report) and the last write was under OK_FLUSH_SECONDS
    ago."""
    buffered = buffer.get(key)
    if hold:
        if buffered is None:
            buffer[key] = [ok, time.monotonic()]
            return None
        buffered[0] += ok
        if time.monotonic() - buffered[1] < OK_FLUSH_SECONDS:
            return None
        ok = buffered[0]
    elif buffered is not None:
        ok += buffered[0]
    buffer.pop(key, None)
    return ok


def _count(row: ProviderCircuit, ok: int, failed: int, error: str, now: datetime) -> None:
    if (now - row.window_started_at).total_seconds() > settings.CIRCUIT_WINDOW_SECONDS:
        row.window_started_at, row.window_ok, row.window_failed = now, 0, 0
    row.window_ok += ok
    row.window_failed += failed
    # (A report's successes came before its failures: buffered ones are older, see circuit_report.)
    row.streak_failed = (0 if ok else row.streak_failed) + failed
    if error:
        row.last_error = error[:255]
    answers = row.window_ok + row.window_failed
    if row.streak_failed >= settings.CIRCUIT_STREAK_FAILURES or (
        row.window_failed >= settings.CIRCUIT_MIN_FAILURES
        and row.window_failed >= settings.CIRCUIT_FAILURE_RATIO * answers
    ):
        row.state = OPEN
        row.opened_at = now
        row.next_probe_at = now + timedelta(seconds=settings.CIRCUIT_PROBE_SECONDS)
        log.error(
            "provider circuit opened for %s/%s: %d of %d requests failed (%s)",
            row.provider,
            row.account,
            row.window_failed,
            answers,
            row.last_error,
        )
    row.updated_at = now
    row.save()


def _close(row: ProviderCircuit, now: datetime) -> None:
    row.state = CLOSED
    row.window_started_at, row.window_ok, row.window_failed = now, 0, 0
    row.streak_failed = 0
    row.next_probe_at = None
    row.updated_at = now
    row.save()
    # opened_at is nullable: only _count opens a circuit and it sets it, but a row is not checked for that.
    open_for = now - row.opened_at if row.opened_at is not None else "an unknown time"
    log.warning("provider circuit closed for %s/%s after %s", row.provider, row.account, open_for)


def circuit_close(provider: str, account: str, *, actor: str = "system") -> int:
    """Close by hand (an operator in the admin): release what waited. Returns how many were released."""
    now = timezone.now()
    with transaction.atomic():
        row = ProviderCircuit.objects.select_for_update().filter(provider=provider, account=account).first()
        if row is None or row.state != OPEN:
            return 0
        row.state = CLOSED
        row.window_started_at, row.window_ok, row.window_failed = now, 0, 0
        row.streak_failed = 0
        row.next_probe_at = None
        row.updated_at = now
        row.save()
    log.warning("provider circuit closed for %s/%s by %s", provider, account, actor)
    return circuit_release(provider=provider, now=now, actor=actor)


def circuit_release(*, provider: str, now: datetime, actor: str = "system") -> int:
    """Every message waiting for the provider becomes due now (the next sweep releases it within the
    limits). No timeline entry: the next step (queued / attempt) is the entry."""
    released = 0
    for status in (Status.SCHEDULED, Status.QUEUED):
        while True:
            ids = list(
                Message.objects.filter(
                    status=status, reason_code=REASON_UNAVAILABLE, provider=provider, run_after__gt=now
                ).values_list("pk", flat=True)[:RELEASE_BATCH]
            )
            if not ids:
                break
            released += transitions.run_after_push(ids, status=status, run_after=now)
    return released


def circuit_tick(now: datetime) -> str:
    """Once per sweep pass: for each open circuit whose probe is due, release one waiting message of that
    provider (the oldest parked as provider_unavailable) as the probe. Database work only; the send
    worker makes the request, and its answer closes the circuit (circuit_report). Idle: one indexed
    query over a handful of circuit rows."""
    result = "none"
    for row in ProviderCircuit.objects.filter(state=OPEN).exclude(next_probe_at__gt=now):
        result = _probe_message(row.provider, row.account, now)
    return result


def _probe_message(provider: str, account: str, now: datetime) -> str:
    with transaction.atomic():
        for status in (Status.QUEUED, Status.SCHEDULED):
            waiting = list(
                Message.objects.filter(status=status, reason_code=REASON_UNAVAILABLE, provider=provider)
                .order_by("run_after")
                .select_for_update(skip_locked=True)
                .values("id", "version", "priority")[:1]
            )
            if not waiting:
                continue
            if not probe_take(provider, account, now=now):
                return "none"
            row = waiting[0]
            recovery = now + timedelta(seconds=settings.QUEUED_RECOVERY_SECONDS)
            # A probe skips the release gates, the daily quota's among them: not stamped as released, so
            # a later cancel gives back no released segments it never took (scheduling.limits.execution).
            unreleased = {"queued_at": None} if status == Status.SCHEDULED else {}
            moved = transitions.transition_versioned(
                [(row["id"], row["version"], {"run_after": recovery, "published_at": now})],
                from_status=status,
                to_status=Status.QUEUED,
                kind="queued" if status == Status.SCHEDULED else "republished",
                per_row_columns=("run_after", "published_at"),
                set_fields={
                    "reason_code": REASON_PROBE,
                    "status_reason": "probe: is the provider back?",
                    **unreleased,
                },
                details={"probe": True},
                now=now,
            )
            if moved:
                from smsgw import stages

                stages.publish_after_commit()(row["priority"], moved, provider=provider)
                return "message"
    return "nothing_waiting"


def circuit_probe_account(*, now: datetime | None = None) -> str:
    """Beat task body: an open circuit with no message waiting to probe it is probed by fetching the
    account (no message spent), so it does not stay open for ever on an idle gateway."""
    from delivery.providers import PROVIDERS, get_adapter

    now = now or timezone.now()
    result = "closed"
    for row in ProviderCircuit.objects.filter(state=OPEN, provider__in=list(PROVIDERS)):
        adapter = get_adapter(row.provider)
        if adapter.account != row.account:
            continue  # an account this process has no credentials for
        result = _probe_account(adapter, now)
    return result


def _probe_account(adapter, now: datetime) -> str:
    provider, account = adapter.name, adapter.account
    if Message.objects.filter(
        status__in=[Status.QUEUED, Status.SCHEDULED], reason_code=REASON_UNAVAILABLE, provider=provider
    ).exists():
        return "messages_waiting"  # a message probe (circuit_tick) is the truer test
    if not probe_take(provider, account, now=now):
        return "not_due"
    ok, _detail = adapter.probe()
    if ok:
        circuit_report(provider=provider, account=account, ok=1, failed=0, probe_ok=True, now=timezone.now())
        return "closed_by_account_probe"
    return "still_down"
