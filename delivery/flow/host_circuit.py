"""The host circuit: this host cannot reach the provider account, while other hosts can
(delivery.flow.circuit says when unanswered failures count here rather than against the account's
circuit). One ``ProviderHostCircuit`` row per (provider, account, host), shared by the host's processes,
opened by the account circuit's thresholds, probed with a backoff, closed by any answer."""

from __future__ import annotations

import logging
import os
import socket
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from delivery.flow.circuit import CLOSED, OPEN, CircuitState, ok_take
from delivery.models import ProviderHostCircuit

log = logging.getLogger(__name__)

_host_ok_buffer: dict[tuple[int, str, str], list] = {}  # per process: answers not yet written to the row
_host_local: dict[tuple[int, str, str], bool] = {}  # per process: this host's circuit, as last seen open


def host_id() -> str:
    """This host's name in the host circuits: SMSGW_HOST_ID, or the machine's hostname."""
    return settings.HOST_ID or socket.gethostname()[:128]


def host_state(provider: str, account: str) -> CircuitState:
    """This host's circuit for the account (a send worker reads it once per batch)."""
    row = (
        ProviderHostCircuit.objects.filter(provider=provider, account=account, host=host_id())
        .values("state", "opened_at", "next_probe_at", "last_error")
        .first()
    )
    key = (os.getpid(), provider, account)
    if row is None:
        _host_local[key] = False
        return CircuitState(CLOSED)
    _host_local[key] = row["state"] == OPEN
    return CircuitState(row["state"], row["opened_at"], row["next_probe_at"], row["last_error"])


def host_seen_open(provider: str, account: str) -> bool:
    """This process's last view of its host's circuit (what a worker holds unsent checks before it goes)."""
    return _host_local.get((os.getpid(), provider, account), False)


def others_answered(provider: str, account: str, *, host: str, now: datetime) -> bool:
    """Did another host get an answer from the provider account within the circuit window?"""
    since = now - timedelta(seconds=settings.CIRCUIT_WINDOW_SECONDS)
    return (
        ProviderHostCircuit.objects.filter(provider=provider, account=account, last_answer_at__gte=since)
        .exclude(host=host)
        .exists()
    )


def host_probe_take(provider: str, account: str, *, now: datetime | None = None) -> bool:
    """Claim this host's due probe (a compare-and-set: one process of the host sends it). The next one
    is due after the backoff, should this one get no answer either."""
    now = now or timezone.now()
    row = ProviderHostCircuit.objects.filter(
        provider=provider, account=account, host=host_id(), state=OPEN
    ).first()
    if row is None or (row.next_probe_at and row.next_probe_at > now):
        return False
    won = ProviderHostCircuit.objects.filter(pk=row.pk, state=OPEN, next_probe_at=row.next_probe_at).update(
        next_probe_at=now + timedelta(seconds=_host_backoff(row.failed_probes + 1)), probes=row.probes + 1
    )
    return won == 1


def _host_backoff(failed_probes: int) -> float:
    first, most = settings.HOST_CIRCUIT_PROBE_SECONDS, settings.HOST_CIRCUIT_PROBE_MAX_SECONDS
    return min(most, first * 2 ** min(failed_probes, 16))


def host_report(
    *,
    provider: str,
    account: str,
    answered: int,
    unanswered: int,
    probe_answered: bool = False,
    probe_unanswered: bool = False,
    error: str = "",
    now: datetime | None = None,
) -> bool:
    """Count a batch's reach from this host: ``answered`` requests got an answer (any answer: it came
    back over the network), ``unanswered`` provider failures got none. While the host circuit is open,
    its probe's answer (``probe_answered``: a probe message among these got one) closes it, and a probe
    without an answer (``probe_unanswered``) doubles the wait for the next probe; other answers are late
    ones, to requests sent before it opened, and prove nothing about now.

    Returns whether the unanswered failures are this host's own (another host got answers within the
    window): then they count here and not in the account's circuit. Otherwise (no other host answered:
    the provider, or every host, is cut off) they are the account's, as any provider failure."""
    if not answered and not unanswered:
        return False
    now = now or timezone.now()
    host = host_id()
    key = (os.getpid(), provider, account)
    # Answers only say when this host last reached the provider: written at most every OK_FLUSH_SECONDS
    # per process (as the account's successes are), not a row lock per batch.
    hold = not unanswered and not probe_answered and not _host_local.get(key, False)
    total = ok_take(_host_ok_buffer, key, answered, hold=hold)
    if total is None:
        return False
    answered = total
    own = bool(unanswered) and others_answered(provider, account, host=host, now=now)
    row = _host_row(provider, account, host, now)
    with transaction.atomic():
        row = ProviderHostCircuit.objects.select_for_update().get(pk=row.pk)
        if answered:
            row.last_answer_at = now
        if error and unanswered:
            row.last_error = error[:255]
        if row.state == OPEN:
            if probe_answered:
                _host_close(row, now, by="a probe's answer")
            elif probe_unanswered:
                row.failed_probes += 1
                row.next_probe_at = max(
                    row.next_probe_at or now, now + timedelta(seconds=_host_backoff(row.failed_probes))
                )
        else:
            _host_count(row, answered, unanswered if own else 0, now)
        row.updated_at = now
        row.save()
    _host_local[key] = row.state == OPEN
    return own


def _host_row(provider: str, account: str, host: str, now: datetime) -> ProviderHostCircuit:
    row = ProviderHostCircuit.objects.filter(provider=provider, account=account, host=host).first()
    if row is not None:
        return row
    try:
        with transaction.atomic():
            return ProviderHostCircuit.objects.create(
                provider=provider,
                account=account,
                host=host,
                state=CLOSED,
                window_started_at=now,
                updated_at=now,
            )
    except IntegrityError:
        return ProviderHostCircuit.objects.get(provider=provider, account=account, host=host)


def _host_count(row: ProviderHostCircuit, answered: int, failed: int, now: datetime) -> None:
    """The account circuit's rule (``_count``) over this host's reach: answered against unanswered."""
    if (now - row.window_started_at).total_seconds() > settings.CIRCUIT_WINDOW_SECONDS:
        row.window_started_at, row.window_ok, row.window_failed = now, 0, 0
    row.window_ok += answered
    row.window_failed += failed
    row.streak_failed = (0 if answered else row.streak_failed) + failed
    total = row.window_ok + row.window_failed
    if failed and (
        row.streak_failed >= settings.CIRCUIT_STREAK_FAILURES
        or (
            row.window_failed >= settings.CIRCUIT_MIN_FAILURES
            and row.window_failed >= settings.CIRCUIT_FAILURE_RATIO * total
        )
    ):
        row.state = OPEN
        row.opened_at = now
        row.failed_probes = 0
        row.next_probe_at = now + timedelta(seconds=_host_backoff(0))
        log.error(
            "host circuit opened for %s/%s on %s: %d of %d requests got no answer while other hosts got "
            "answers (%s)",
            row.provider,
            row.account,
            row.host,
            row.window_failed,
            total,
            row.last_error,
        )


def _host_close(row: ProviderHostCircuit, now: datetime, *, by: str) -> None:
    row.state = CLOSED
    row.window_started_at, row.window_ok, row.window_failed = now, 0, 0
    row.streak_failed = row.failed_probes = 0
    row.next_probe_at = None
    open_for = now - row.opened_at if row.opened_at is not None else "an unknown time"
    log.warning(
        "host circuit closed for %s/%s on %s by %s after %s",
        row.provider,
        row.account,
        row.host,
        by,
        open_for,
    )


def host_circuit_close(provider: str, account: str, host: str, *, actor: str = "system") -> bool:
    """Close one host's circuit by hand (an operator in the admin). Its parked messages are due within
    SMSGW_HOST_CIRCUIT_PARK_SECONDS anyway: nothing to release."""
    now = timezone.now()
    with transaction.atomic():
        row = (
            ProviderHostCircuit.objects.select_for_update()
            .filter(provider=provider, account=account, host=host, state=OPEN)
            .first()
        )
        if row is None:
            return False
        _host_close(row, now, by=actor)
        row.updated_at = now
        row.save()
    return True
