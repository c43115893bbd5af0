"""Status look-ups: a message left at `sent` with no final receipt is asked about at the provider.

A final receipt can be lost for reasons outside our control (the provider gave up on our endpoint, a
callback that was never posted, an outage before the spool existed), and the provider does not post it
twice. So a `sent` message older than SMSGW_STATUS_LOOKUP_AFTER_SECONDS is fetched by sid through its
adapter (``fetch_status``), and the answer is stored as a ReceiptEvent marked ``source: lookup``: the
status processor applies it with every rule a callback gets (forward only, error classes, dedupe
against the real callback), and its timeline entry says it came from a look-up.

* Still not final (`sent`, or the provider still holds it): looked up again after a doubling delay
  (AFTER, 2 x AFTER, ...), at most SMSGW_STATUS_LOOKUP_MAX_TRIES times; then left alone, with one
  timeline note saying so. A provider that says the sid does not exist (404) is told on the timeline too.
* Bounded: at most SMSGW_STATUS_LOOKUP_RATE requests per second, SMSGW_STATUS_LOOKUP_BATCH_SIZE messages
  and SMSGW_STATUS_LOOKUP_BUDGET_SECONDS per run, each request SMSGW_STATUS_LOOKUP_TIMEOUT_SECONDS at most.
* A provider whose circuit is open (delivery.flow.circuit) is not asked; nor, for the rest of the run, one
that
  failed to answer (its look-up is not counted).
* Each try is claimed by a compare-and-set on its counter before the request, so overlapping runs never
  ask twice for one message, and a run that dies never loops on it.
* Sooner for a callback we could not verify through our own fault (signed with a key this host does not
  hold, receipts.api): ``lookup_soon`` makes its message due at the next run (every
  SMSGW_STATUS_LOOKUP_INTERVAL, 60 s by default) instead of an hour after it was sent. Its tries start
  again from the first; a message whose look-ups were stopped stays stopped.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import TypedDict, cast

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from delivery.flow.circuit import circuit_state
from delivery.providers import ProviderQueryError, get_adapter
from delivery.providers.base import LOOKUP_SOURCE, ProviderAdapter
from receipts.ingest import receipt_ingest
from receipts.models import StatusLookup
from scheduling.lifecycle import transitions
from scheduling.models import Message, Status

log = logging.getLogger(__name__)

FINAL = frozenset({"delivered", "undelivered", "failed", "canceled"})
MAX_DELAY = timedelta(days=1)
GAVE_UP = "status_lookup_stopped"


def _delay(tries: int) -> timedelta:
    return min(timedelta(seconds=settings.STATUS_LOOKUP_AFTER_SECONDS * 2 ** max(tries - 1, 0)), MAX_DELAY)


class StaleSent(TypedDict):
    id: int
    provider: str
    provider_message_id: str


def stale_sent_due(now: datetime, limit: int) -> list[StaleSent]:
    """The messages to look up now: those asked for sooner (``lookup_soon``) first, then the stale ones."""
    cutoff = now - timedelta(seconds=settings.STATUS_LOOKUP_AFTER_SECONDS)
    sent = Message.objects.filter(status=Status.SENT, provider_message_id__isnull=False)
    fields = ("id", "provider", "provider_message_id")
    rows = list(
        sent.filter(
            status_lookup__tries=0, status_lookup__next_at__lte=now, status_lookup__gave_up_at__isnull=True
        )
        .order_by("status_lookup__next_at")
        .values(*fields)[:limit]
    )
    if len(rows) < limit:
        soon = {r["id"] for r in rows}
        stale = (
            sent.filter(sent_at__lte=cutoff)
            .filter(
                Q(status_lookup__isnull=True)
                | Q(status_lookup__next_at__lte=now, status_lookup__gave_up_at__isnull=True)
            )
            .order_by("sent_at")
            .values(*fields)[:limit]
        )
        rows += [r for r in stale if r["id"] not in soon][: limit - len(rows)]
    # provider_message_id__isnull=False: never None here, which the stubs' row type cannot know.
    return cast("list[StaleSent]", rows)


def lookup_soon(provider: str, provider_message_id: str, *, now: datetime | None = None) -> int | None:
    """Look the message with this provider id up at the next run (its tries start again); the message's
    id, or None when no message has this id. A message whose look-ups were stopped is left stopped."""
    now = now or timezone.now()
    message_id = (
        Message.objects.filter(provider=provider, provider_message_id=provider_message_id)
        .values_list("id", flat=True)
        .first()
    )
    if message_id is None:
        return None
    row, created = StatusLookup.objects.get_or_create(message_id=message_id, defaults={"next_at": now})
    if not created:
        StatusLookup.objects.filter(pk=row.pk, gave_up_at__isnull=True).update(tries=0, next_at=now)
    return message_id


def _claim(message_id: int, now: datetime) -> int | None:
    """Take this message's next try; its number, or None when another run has it (or it was stopped)."""
    row, _ = StatusLookup.objects.get_or_create(message_id=message_id, defaults={"next_at": now})
    tries = row.tries + 1
    won = StatusLookup.objects.filter(
        pk=row.pk, tries=row.tries, gave_up_at__isnull=True, next_at__lte=now
    ).update(tries=tries, next_at=now + _delay(tries))
    return tries if won else None


def _unclaim(message_id: int, tries: int, now: datetime) -> None:
    # The provider did not answer: that says nothing about the message, so it does not count.
    StatusLookup.objects.filter(message_id=message_id, tries=tries).update(tries=tries - 1, next_at=now)


def _stop(message_id: int, tries: int, status: str, note: str, now: datetime) -> None:
    stopped = StatusLookup.objects.filter(message_id=message_id, gave_up_at__isnull=True).update(
        gave_up_at=now, last_status=status
    )
    if stopped:  # one note, whoever stops it
        transitions.event_record(
            message_id,
            kind=GAVE_UP,
            status=Status.SENT,
            details={"source": LOOKUP_SOURCE, "provider_status": status, "lookups": tries, "note": note},
        )


def stale_sent_lookup_run(*, now: datetime | None = None) -> dict[str, int]:
    """One bounded pass; returns counts by what happened (for logs and tests)."""
    now = now or timezone.now()
    due = stale_sent_due(now, settings.STATUS_LOOKUP_BATCH_SIZE)
    run = _Run(now)  # its time budget starts once the due messages are read
    if not due:
        return run.counts
    for msg in due:
        provider = msg["provider"] or settings.SMSGW_PROVIDER
        adapter = get_adapter(provider)
        if not run.may_ask(provider, adapter):
            run.counts["skipped"] += 1
            continue
        if not run.turn():
            break  # the rest waits for the next run
        run.look_up(msg, provider, adapter)
    if run.counts["looked_up"]:
        log.info("status lookup: %s", run.counts)
    return run.counts


class _Run:
    """One pass's bounds (its time budget, the request rate) and what it has met so far."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.counts = {"looked_up": 0, "final": 0, "not_final": 0, "stopped": 0, "missing": 0, "skipped": 0}
        self.deadline = time.monotonic() + settings.STATUS_LOOKUP_BUDGET_SECONDS
        self.timeout = settings.STATUS_LOOKUP_TIMEOUT_SECONDS
        self.spacing = 1.0 / settings.STATUS_LOOKUP_RATE
        self.next_request = time.monotonic()
        self.skip: set[str] = set()  # providers with an open circuit, or that failed to answer in this run
        self.checked: set[str] = set()

    def may_ask(self, provider: str, adapter: ProviderAdapter) -> bool:
        if provider not in self.checked:
            self.checked.add(provider)
            if not adapter.capabilities.fetch_by_id or circuit_state(provider, adapter.account).is_open:
                self.skip.add(
                    provider
                )  # it cannot be asked by id (its receipts are all we get), or it is down
        return provider not in self.skip

    def turn(self) -> bool:
        """Wait for the next request's turn (the rate limit); False when a request could no longer end
        within the run's budget."""
        wait = self.next_request - time.monotonic()
        if time.monotonic() + max(wait, 0.0) + self.timeout > self.deadline:
            return False
        if wait > 0:
            time.sleep(wait)
        return True

    def look_up(self, msg: StaleSent, provider: str, adapter: ProviderAdapter) -> None:
        """One message's try: claimed, asked, and its answer stored as a receipt (or the look-ups stopped)."""
        now, counts = self.now, self.counts
        tries = _claim(msg["id"], now)
        if tries is None:
            return
        self.next_request = time.monotonic() + self.spacing
        try:
            callback = adapter.fetch_status(msg["provider_message_id"], timeout=self.timeout)
        except ProviderQueryError as exc:
            log.warning(
                "status lookup: %s did not answer (%s); its messages wait for the next run", provider, exc
            )
            _unclaim(msg["id"], tries, now)
            self.skip.add(provider)
            return
        counts["looked_up"] += 1
        if callback is None:
            counts["missing"] += 1
            _stop(msg["id"], tries, "", "the provider has no message with this sid; not looked up again", now)
            return
        receipt_ingest(provider=provider, callback=callback)
        StatusLookup.objects.filter(message_id=msg["id"]).update(last_status=callback.raw_status)
        if callback.normalized_status in FINAL:
            counts["final"] += 1
        elif tries >= settings.STATUS_LOOKUP_MAX_TRIES:
            counts["stopped"] += 1
            _stop(
                msg["id"],
                tries,
                callback.raw_status,
                f"still {callback.raw_status or 'without a status'} at the provider after {tries} lookups; "
                "not looked up again",
                now,
            )
        else:
            counts["not_final"] += 1
