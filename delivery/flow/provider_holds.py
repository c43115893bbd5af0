"""Holds: sending stopped for one scope of a provider account after an account fault.

An account fault (Twilio 20003 bad credentials, 30002 suspended, 21606/30034 a sender that may not send,
21408 a destination outside the account's geo permissions) is not the message's fault: every message in
the same scope would fail the same way. So instead of dead-lettering them one by one, the scope is held:

* the message that met the fault goes back to ``queued`` (its attempt is not charged) and waits;
* the send worker does not submit any other message in the scope: it parks them in ``queued`` with
  ``run_after`` at the hold's next probe, with one ``held`` timeline entry each;
* an ERROR log line (once, when the hold opens) and an open ``ProviderHold`` row (admin) alert operators;
* probes: an account-wide hold is probed by fetching the account (``adapter.probe``, no message spent)
  every SMSGW_HOLD_PROBE_FIRST_SECONDS, from the beat task ``delivery.holds_probe``; a sender or
  destination hold lets one message through per probe interval (doubling up to
  SMSGW_HOLD_PROBE_MAX_SECONDS after each refused probe message). A probe that works, or an operator
  in the admin, clears the hold and releases its messages at once.

Only ``run_after`` and the reason move while a message is held; it stays cancellable throughout and its
validity still counts, so a hold of any length ends a message only by its validity running out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import phonenumbers
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from delivery.models import ProviderHold
from delivery.providers import get_adapter
from delivery.providers.base import Scope
from scheduling.lifecycle import transitions
from scheduling.lifecycle.reasons import ReasonCode
from scheduling.models import Message, Status

log = logging.getLogger(__name__)

REASON_HELD = ReasonCode.PROVIDER_HOLD
HOLD_CACHE_SECONDS = 1.0  # a send worker re-reads open holds at most once a second
RELEASE_BATCH = 1000  # messages released per statement when a hold clears

_cache: dict[tuple[int, str, str], tuple[float, list[OpenHold]]] = {}


@dataclass(frozen=True)
class OpenHold:
    id: int
    scope: str
    scope_value: str
    error_code: str
    reason: str
    next_probe_at: datetime
    probe_interval_seconds: int = 0

    def park_until(self, now: datetime) -> datetime:
        """Where a held message waits: the next probe, and at least half a probe interval from now (a
        worker's view of the hold may be a second old; parking a message for a moment only to
        re-publish it at once would churn)."""
        return max(self.next_probe_at, now + timedelta(seconds=max(1.0, self.probe_interval_seconds / 2)))

    def matches(self, *, to: str, from_number: str, sender_pool: str) -> bool:
        if self.scope == Scope.ACCOUNT:
            return True
        if self.scope == Scope.SENDER:
            return self.scope_value in (from_number, sender_pool)
        return to.startswith(self.scope_value)

    def describe(self) -> str:
        what = {"account": "the provider account", "sender": "sender", "destination": "destinations"}
        target = what.get(self.scope, self.scope)
        if self.scope != Scope.ACCOUNT:
            target = f"{target} {self.scope_value}"
        return f"held: {target} refused by the provider ({self.error_code} {self.reason})"[:255]


def scope_value(scope: str, *, to: str, from_number: str, sender_pool: str) -> str:
    if scope == Scope.SENDER:
        return from_number or sender_pool
    if scope == Scope.DESTINATION:
        try:
            return f"+{phonenumbers.parse(to).country_code}"  # geo permissions are per country
        except phonenumbers.NumberParseException:
            return to[:4]
    return ""


def holds_open(provider: str, account: str, *, fresh: bool = False) -> list[OpenHold]:
    """Open holds of one account, cached for HOLD_CACHE_SECONDS per process (one indexed query)."""
    import os

    key = (os.getpid(), provider, account)
    now = time.monotonic()
    cached = _cache.get(key)
    if cached is not None and cached[0] > now and not fresh:
        return cached[1]
    holds = [
        OpenHold(
            h.id, h.scope, h.scope_value, h.error_code, h.reason, h.next_probe_at, h.probe_interval_seconds
        )
        for h in ProviderHold.objects.filter(provider=provider, account=account, cleared_at__isnull=True)
    ]
    _cache[key] = (now + HOLD_CACHE_SECONDS, holds)
    return holds


def _forget(provider: str, account: str) -> None:
    for key in [k for k in _cache if k[1:] == (provider, account)]:
        _cache.pop(key, None)


def hold_open(
    *,
    provider: str,
    account: str,
    scope: str,
    scope_value: str,
    error_code: str,
    reason: str,
    now: datetime | None = None,
) -> OpenHold:
    """Open a hold, or note that an open one was met again. Returns it."""
    now = now or timezone.now()
    first = settings.HOLD_PROBE_FIRST_SECONDS
    existing = ProviderHold.objects.filter(
        provider=provider, account=account, scope=scope, scope_value=scope_value, cleared_at__isnull=True
    ).first()
    if existing is None:
        try:
            with transaction.atomic():
                existing = ProviderHold.objects.create(
                    provider=provider,
                    account=account,
                    scope=scope,
                    scope_value=scope_value,
                    error_code=error_code,
                    reason=reason[:255],
                    opened_at=now,
                    last_seen_at=now,
                    next_probe_at=now + timedelta(seconds=first),
                    probe_interval_seconds=first,
                )
        except IntegrityError:  # another worker opened it first
            existing = ProviderHold.objects.get(
                provider=provider,
                account=account,
                scope=scope,
                scope_value=scope_value,
                cleared_at__isnull=True,
            )
        else:
            # The alert: once per hold, not per message.
            log.error(
                "provider hold opened: %s %s %s for %s/%s (%s); sending for this scope is paused",
                scope,
                scope_value,
                error_code,
                provider,
                account,
                reason,
            )
    else:
        # Messages already in flight meet the same fault: noted, but the probe schedule is unchanged
        # (only a failed probe backs it off, hold_backoff).
        ProviderHold.objects.filter(pk=existing.pk).update(last_seen_at=now)
    _forget(provider, account)
    return OpenHold(
        existing.id,
        existing.scope,
        existing.scope_value,
        existing.error_code,
        existing.reason,
        existing.next_probe_at,
        existing.probe_interval_seconds,
    )


def hold_open_for(
    *,
    provider: str,
    account: str,
    info,
    error_code: str,
    message: Mapping[str, Any],
    now: datetime | None = None,
) -> OpenHold:
    """Open (or meet again) the hold an account fault calls for, scoped by the error table's row
    (``ErrorInfo.scope``) around the message that met it (``to``, ``from_number``,
    ``sender_pool``)."""
    scope = info.scope or Scope.ACCOUNT
    return hold_open(
        provider=provider,
        account=account,
        scope=scope,
        scope_value=scope_value(
            scope,
            to=message["to"],
            from_number=message["from_number"],
            sender_pool=message["sender_pool"],
        ),
        error_code=error_code,
        reason=info.title,
        now=now,
    )


def hold_probe_take(hold_id: int, *, now: datetime | None = None) -> bool:
    """Claim the hold's due probe (compare-and-set on next_probe_at): exactly one worker wins it and
    sends one message of the scope; the others keep holding."""
    now = now or timezone.now()
    hold = ProviderHold.objects.filter(pk=hold_id, cleared_at__isnull=True).first()
    if hold is None or hold.next_probe_at > now:
        return False
    won = ProviderHold.objects.filter(pk=hold_id, next_probe_at=hold.next_probe_at).update(
        next_probe_at=now + timedelta(seconds=hold.probe_interval_seconds), probes=hold.probes + 1
    )
    return won == 1


def hold_backoff(hold_id: int, *, detail: str = "", now: datetime | None = None) -> None:
    """A probe failed: the next one waits twice as long (up to SMSGW_HOLD_PROBE_MAX_SECONDS)."""
    now = now or timezone.now()
    hold = ProviderHold.objects.filter(pk=hold_id, cleared_at__isnull=True).first()
    if hold is None:
        return
    interval = min(hold.probe_interval_seconds * 2, settings.HOLD_PROBE_MAX_SECONDS)
    ProviderHold.objects.filter(pk=hold_id).update(
        probe_interval_seconds=interval,
        next_probe_at=now + timedelta(seconds=interval),
        last_probe_detail=detail[:255],
    )
    _forget(hold.provider, hold.account)


def hold_clear(hold_id: int, *, by: str, reason: str, now: datetime | None = None) -> int:
    """Close the hold and release its messages (run_after = now, so the next sweep re-publishes them).
    Returns how many were released; 0 if the hold was already cleared."""
    now = now or timezone.now()
    hold = ProviderHold.objects.filter(pk=hold_id).first()
    if hold is None:
        return 0
    closed = ProviderHold.objects.filter(pk=hold_id, cleared_at__isnull=True).update(
        cleared_at=now, cleared_by=by[:64], cleared_reason=reason[:255]
    )
    _forget(hold.provider, hold.account)
    if not closed:
        return 0
    log.warning("provider hold cleared: %s %s by %s (%s)", hold.scope, hold.scope_value, by, reason)
    view = OpenHold(hold.id, hold.scope, hold.scope_value, hold.error_code, hold.reason, now)
    released = _uncertain_release(hold, by=by, reason=reason, now=now)
    last_id = 0
    while True:
        # Held messages carry reason_code provider_hold; only those in this hold's scope are released
        # (another open hold may still cover the rest).
        rows = list(
            Message.objects.filter(status=Status.QUEUED, reason_code=REASON_HELD, id__gt=last_id)
            .order_by("id")
            .values("id", "to", "from_number", "sender_pool")[:RELEASE_BATCH]
        )
        if not rows:
            return released
        last_id = rows[-1]["id"]
        others = [h for h in holds_open(hold.provider, hold.account, fresh=True) if h.id != hold.id]
        ids = [
            r["id"]
            for r in rows
            if view.matches(to=r["to"], from_number=r["from_number"], sender_pool=r["sender_pool"])
            and not any(
                h.matches(to=r["to"], from_number=r["from_number"], sender_pool=r["sender_pool"])
                for h in others
            )
        ]
        released += _release(
            ids, Status.QUEUED, {"reason_code": "", "status_reason": ""}, hold, by=by, reason=reason, now=now
        )


def _uncertain_release(hold: ProviderHold, *, by: str, reason: str, now: datetime) -> int:
    """Uncertain messages the reconciler parked on an account hold (a 404 it could not believe,
    delivery.sending.reconcile) are looked up again at once: they stay `sending`, never resent here."""
    if hold.scope != Scope.ACCOUNT:
        return 0
    ids = list(
        Message.objects.filter(
            status=Status.SENDING, reason_code=REASON_HELD, provider=hold.provider
        ).values_list("id", flat=True)
    )
    if not ids:
        return 0
    return _release(
        ids,
        Status.SENDING,
        {
            "reason_code": ReasonCode.SUBMISSION_UNCERTAIN,
            "status_reason": "uncertain; looked up again now that the account answers",
        },
        hold,
        by=by,
        reason=reason,
        now=now,
    )


def _release(
    ids: list[int], status: str, fields: dict, hold: ProviderHold, *, by: str, reason: str, now: datetime
) -> int:
    """Held messages due now (``hold_released``), each still carrying the hold's reason code; they keep
    their status (`queued` ones go out again, uncertain `sending` ones are looked up again)."""
    with transaction.atomic():
        moved = transitions.transition_many(
            ids,
            from_status=status,
            to_status=status,
            kind="hold_released",
            actor=by[:64],
            extra_where='"reason_code" = %s',
            extra_params=[REASON_HELD],
            set_fields={"run_after": now, **fields},
            details={"hold_id": hold.id, "reason": reason[:200]},
            now=now,
        )
    return len(moved)


def holds_probe_due(*, now: datetime | None = None) -> dict[str, int]:
    """Probe every account-wide hold whose probe is due (no message is spent: the adapter fetches the
    account). Sender and destination holds are probed by the send worker with one real message."""
    now = now or timezone.now()
    probed = cleared = 0
    due = ProviderHold.objects.filter(
        cleared_at__isnull=True, scope=Scope.ACCOUNT, next_probe_at__lte=now
    ).order_by("next_probe_at")[:20]
    for hold in due:
        if not hold_probe_take(hold.id, now=now):
            continue
        probed += 1
        adapter = get_adapter(hold.provider)
        if adapter.account != hold.account:
            # The provider is configured with another account now (a wrong account SID was fixed, say):
            # nothing sends under the held one, so the hold no longer applies. Its uncertain messages are
            # looked up again under the configured account (_uncertain_release).
            hold_clear(
                hold.id,
                by="probe",
                reason="the provider is now configured with another account; this hold no longer applies",
                now=timezone.now(),
            )
            cleared += 1
            continue
        ok, detail = adapter.probe()
        ProviderHold.objects.filter(pk=hold.id).update(last_probe_detail=detail[:255])
        if ok:
            hold_clear(hold.id, by="probe", reason=f"probe succeeded: {detail}", now=timezone.now())
            cleared += 1
        # A failed account probe costs one GET: it keeps its interval (hold_probe_take set the next one),
        # so a fixed token is noticed within SMSGW_HOLD_PROBE_FIRST_SECONDS. Probes that spend a message
        # (sender and destination holds) back off instead (hold_backoff).
    return {"probed": probed, "cleared": cleared}
