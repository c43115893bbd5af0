"""The restore fence (docs/restore.md): after a database restore, nothing that may already have left the
gateway is sent again before the provider has been asked.

A restored database is behind the provider. Between the backup point (``since``) and the moment the old
gateway stopped, it went on releasing and submitting messages whose rows the restore brought back as they
were: `scheduled`, `queued` or `sending`. Sending those again blindly could deliver each twice. So before any
worker starts, every message that could have left since ``since`` is made an uncertain submission, exactly
as if a worker had died in the middle of the provider call, and the reconciler (delivery.sending.reconcile)
decides with its usual rules: found at the provider, recorded sent under that sid and never sent again;
proven absent, released to send once; ambiguous, never resent, left for an operator.

**Which messages are fenced** (``fenceable``), by their status in the restored database:

* `sending`: all. Its attempt may have been answered, or retried, after the backup point.
* `queued`: all. Each was due and released; a worker could have claimed it at any time after the backup
  point (one waiting for a hold or a pacing slot too: a cleared hold releases at once).
* `scheduled`: those whose next run (``run_after``) is at or before the fence's ``now``, and those whose
  due time (``due_at``) is, unless they wait for a person (``AWAITING_A_PERSON``: a paused campaign, a
  review, a disabled tenant, a used-up quota). The old gateway could not have sent a message before it was
  due, and it stopped before the fence runs; a message due later could not have left and is not touched.
  The due time too, because a message waiting past it for the provider or for capacity (a hold, an open
  circuit, pacing) is released as soon as that ends, not at its ``run_after``; one expired since is fenced
  too (it may have been sent before it expired). One waiting for a person stays as the restore left it:
  only that person's act, lost with the rest of the lost history, could have released it.

Terminal messages are left alone: a `sent` one has its sid, and what became of it later (a lost receipt)
is asked by the status look-up like any other. What the fence cannot see is what the lost history did to
a message beyond sending it: a cancel or an edit made after the backup point is lost with it (the runbook
says so).

**How**: each fenced message moves to `sending` (a ``fenced`` timeline entry naming the backup time and who
ran the fence) with its lease already expired (``run_after`` = now), so the first sweep hands it to the
reconciler. Its latest attempt, when it is a `sending` message's pending or uncertain one without a sid,
is marked uncertain; otherwise a new uncertain attempt is recorded, as a claim would (the attempt count and
provider calls go up by one), standing for what the lost history may have submitted. Either way the attempt
carries ``response["fence"]``: the backup time, the fence's time and the actor. The listing then looks from
the earlier of the attempt's start and the backup time (less clock skew), and absence can only be proven by
a listing made late enough after the *fence* (``fenced_at`` + request timeout + grace + list lag, rule
``restore_fence``): the old gateway may have submitted up to the moment it stopped, which is before the
fence but could be just before.

A signed status callback of the lost history names its attempt (``?m=&a=``, receipts.unknown): the fence's
attempt has the next number the message would have used, so a callback for the first submission after the
backup point finds it uncertain and records the message sent at once.

Idempotent: a message whose attempts already carry a fence for the same backup time is skipped, whatever
became of it since. Bounded: batches of FENCE_BATCH_SIZE, one transaction each, compare-and-set on the
version read (a row that moved meanwhile, because a worker was left running, is not fenced by this pass).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from delivery.models import Attempt, AttemptOutcome
from delivery.sending.attempts import attempt_route
from scheduling.lifecycle import transitions
from scheduling.lifecycle.reasons import ReasonCode
from scheduling.models import Message, Status

# Bounded so one transaction holds a few hundred row locks for well under a second; the fence runs once,
# before the workers, so throughput matters less than never holding the table.
FENCE_BATCH_SIZE = 500
FENCE_KEY = "fence"
FENCED = "fenced"  # the timeline entry's kind
FROM_STATUSES = (Status.SCHEDULED, Status.QUEUED, Status.SENDING)
# A `sending` message's latest attempt the fence takes over (its outcome is unknown) instead of adding one.
OPEN_OUTCOMES = (AttemptOutcome.PENDING, AttemptOutcome.UNCERTAIN)
# Scheduled messages that wait for a person, not for a time or the provider: a paused campaign, a review,
# a disabled tenant, a used-up quota. Only that person's act could have released them early; made after
# the backup, it is lost with the rest of the lost history, and the restored rows are believed (the runbook
# says to check before releasing them again). Fencing them would release them when proven absent, over the
# pause the database still shows.
AWAITING_A_PERSON = (
    ReasonCode.CAMPAIGN_PAUSED,
    ReasonCode.HELD_FOR_REVIEW,
    ReasonCode.TENANT_DISABLED,
    ReasonCode.QUOTA_EXCEEDED,
)
ROW_FIELDS = ("id", "status", "version", "attempt_count", "provider_calls", "provider", "route", "route_leg")


class FenceRefused(ValueError):
    """The backup time cannot be fenced from (in the future, or without a UTC offset)."""


@dataclass
class FenceReport:
    since: datetime
    now: datetime
    fenced: dict[str, int] = field(default_factory=lambda: {str(s): 0 for s in FROM_STATUSES})
    already_fenced: int = 0  # fenced before for the same backup time
    moved_meanwhile: int = 0  # changed between the read and the move (a worker still running)
    not_due: int = 0  # scheduled, left alone: due after the fence's now, or waiting for a person
    batches: int = 0

    @property
    def total(self) -> int:
        return sum(self.fenced.values())


def since_parse(value: str, *, now: datetime | None = None) -> datetime:
    """The backup time an operator gives: ISO 8601 with its UTC offset (a naive time is refused: which
    zone the backup tool printed it in is exactly what is easy to get wrong), not in the future."""
    try:
        since = parse_datetime(value.strip())
    except ValueError:
        since = None
    if since is None:
        raise FenceRefused(f"--since {value!r} is not an ISO 8601 time (e.g. 2026-12-05T12:00:00Z)")
    if timezone.is_naive(since):
        raise FenceRefused(f"--since {value!r} has no UTC offset; give one (e.g. 2026-12-05T12:00:00Z)")
    since_check(since, now or timezone.now())
    return since


def since_check(since: datetime, now: datetime) -> None:
    if since > now:
        raise FenceRefused(
            f"--since {since.isoformat()} is in the future (now {now.isoformat()}): a backup is always taken "
            "before it is restored; check the time and its zone"
        )


def fenceable(now: datetime) -> Q:
    """The messages that could have left the gateway since a backup, as seen at ``now`` (module docs)."""
    released_early = Q(due_at__lte=now) & ~Q(reason_code__in=AWAITING_A_PERSON)
    due = Q(run_after__lte=now) | released_early
    return Q(status__in=(Status.SENDING, Status.QUEUED)) | (Q(status=Status.SCHEDULED) & due)


def fenced_at(attempt: Attempt) -> datetime | None:
    """When a restore fence made this attempt uncertain (None: it never did): nothing the lost history
    submitted can be known absent before a listing made late enough after it (delivery.sending.reconcile)."""
    response = attempt.response if isinstance(attempt.response, dict) else {}
    fence = response.get(FENCE_KEY)
    if not isinstance(fence, dict) or not fence.get("fenced_at"):
        return None
    return parse_datetime(str(fence["fenced_at"]))


def messages_fence(
    *, since: datetime, actor: str, now: datetime | None = None, batch_size: int = FENCE_BATCH_SIZE
) -> FenceReport:
    """Fence every message that could have left since ``since`` (the backup time): each becomes an
    uncertain submission the reconciler must settle with the provider before it may be sent. Run after a
    restore and before any worker or beat starts. Returns the counts."""
    now = now or timezone.now()
    since_check(since, now)
    report = FenceReport(since=since, now=now)
    # In UTC: one backup time, however it was written, is one fence (the idempotency check compares it).
    stamp = {"since": since.astimezone(UTC).isoformat(), "fenced_at": now.isoformat(), "actor": actor}
    last = 0
    while True:
        with transaction.atomic():
            rows = list(
                Message.objects.filter(fenceable(now), pk__gt=last)
                .order_by("pk")
                .values(*ROW_FIELDS)[:batch_size]
            )
            if not rows:
                break
            last = rows[-1]["id"]
            report.batches += 1
            _batch_fence(rows, stamp=stamp, actor=actor, now=now, report=report)
        if len(rows) < batch_size:
            break
    report.not_due = Message.objects.filter(status=Status.SCHEDULED).exclude(fenceable(now)).count()
    return report


def _batch_fence(rows: list[dict], *, stamp: dict, actor: str, now: datetime, report: FenceReport) -> None:
    ids = [r["id"] for r in rows]
    done = set(
        Attempt.objects.filter(message_id__in=ids, **{f"response__{FENCE_KEY}__since": stamp["since"]})
        .values_list("message_id", flat=True)
        .distinct()
    )
    report.already_fenced += len(done)
    rows = [r for r in rows if r["id"] not in done]
    taken = _open_attempts([r["id"] for r in rows if r["status"] == Status.SENDING])
    for status in FROM_STATUSES:
        group = [r for r in rows if r["status"] == status]
        if not group:
            continue
        items = []
        for r in group:
            grows = r["id"] not in taken  # a new attempt: counted as a claim counts one
            values = {
                "attempt_count": r["attempt_count"] + grows,
                "provider_calls": r["provider_calls"] + grows,
            }
            items.append((r["id"], r["version"], values))
        moved = set(
            transitions.transition_versioned(
                items,
                from_status=status,
                to_status=Status.SENDING,
                kind=FENCED,
                actor=actor,
                details={
                    "backup_time": stamp["since"],
                    "decision": "restored from a backup: it may have been sent since; the provider is asked "
                    "before any send",
                },
                set_fields={
                    "run_after": now,  # the lease has expired: the first sweep hands it to the reconciler
                    "reason_code": ReasonCode.SUBMISSION_UNCERTAIN,
                    "status_reason": f"restore fence (backup {stamp['since']}): looked up before any send",
                },
                per_row_columns=("attempt_count", "provider_calls"),
                now=now,
            )
        )
        report.moved_meanwhile += len(group) - len(moved)
        report.fenced[str(status)] += len(moved)
        _attempts_record([r for r in group if r["id"] in moved], taken, stamp=stamp, since=stamp["since"])


def _open_attempts(sending_ids: list[int]) -> dict[int, Attempt]:
    """Of `sending` messages, the latest attempt when the fence takes it over: pending or uncertain, and no
    sid (with a sid, the provider took that one: a new attempt stands for anything after it)."""
    latest: dict[int, Attempt] = {}
    for attempt in Attempt.objects.filter(message_id__in=sending_ids).order_by("message_id", "-number"):
        latest.setdefault(attempt.message_id, attempt)
    return {mid: a for mid, a in latest.items() if a.outcome in OPEN_OUTCOMES and not a.provider_message_id}


def _attempts_record(rows: list[dict], taken: dict[int, Attempt], *, stamp: dict, since: str) -> None:
    started = parse_datetime(since)
    assert started is not None  # since_check had it as a datetime
    new = []
    for r in rows:
        attempt = taken.get(r["id"])
        if attempt is not None:
            Attempt.objects.filter(pk=attempt.pk).update(
                outcome=AttemptOutcome.UNCERTAIN, response={**(attempt.response or {}), FENCE_KEY: stamp}
            )
            continue
        new.append(
            Attempt(
                message_id=r["id"],
                number=r["provider_calls"] + 1,
                provider=r["provider"],
                route=attempt_route(r),
                idempotency_token=secrets.token_hex(16),
                # The listing looks from here: anything the lost history submitted came after the backup.
                started_at=started,
                outcome=AttemptOutcome.UNCERTAIN,
                response={FENCE_KEY: stamp},
            )
        )
    Attempt.objects.bulk_create(new)
