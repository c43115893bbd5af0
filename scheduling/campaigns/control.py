"""Campaign control: pause, resume, cancel, and noticing that a campaign is complete (docs/campaigns.md,
"Campaigns: pause, resume, cancel, progress").

Pause and cancel change the Campaign row only; the release step and the send claim then keep its
messages from the provider (scheduling.campaigns.gate). The work that does touch messages runs in bounded
batches, each its own short transaction, so 1M recipients never sit in one transaction:

* resume releases the messages parked while paused (reason ``campaign_paused``): the first batch in the
  request, the rest by a task;
* cancel cancels every pending (``scheduled``/``queued``) message with the single-message stage rules:
  those already ``sending`` or later are left as they are and reported as too late. The first batch runs
  in the request, the rest by a task; a crashed run is picked up by the periodic tick (the campaign's
  ``status_reason`` says the cancellation is still in progress).

Progress always comes from the counters (scheduling.campaigns.progress), never from counting messages.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from scheduling.campaigns import gate as campaign_gate
from scheduling.campaigns.progress import progress_read, progress_read_many
from scheduling.lifecycle import transitions
from scheduling.lifecycle.campaigns import campaign_transition
from scheduling.models import Campaign, CampaignStatus, Message, Status
from smsgw.domain_errors import ConflictError, NotFoundError
from smsgw.models import Tenant

log = logging.getLogger(__name__)

C = CampaignStatus
PENDING = (Status.SCHEDULED, Status.QUEUED)  # what a cancel still reaches
# Not final for completion. `sent` is: the provider has it, and its receipt may never come (the status
# lookup settles those); counters still move when the receipt arrives after the campaign completed.
UNFINISHED = (Status.SCHEDULED, Status.QUEUED, Status.SENDING)
# Reported by a cancel as too late: already with (or past) the provider; single-message cancel's rule.
TOO_LATE = (Status.SENDING, Status.SENT, Status.DELIVERED, Status.UNDELIVERED)
# One batch = one transaction of at most this many rows (a few tens of ms), locks taken SKIP LOCKED so a
# batch never waits on the sweep or a send claim holding some of them.
BATCH_SIZE = 1000
REQUEST_BATCHES = 1  # run in the API/admin request itself, so the answer already shows progress
TASK_BUDGET_SECONDS = 5.0  # one task run, then it re-enqueues itself: other background work gets turns
CANCELLING = "cancelling pending messages"
RESUMING = "resumed: releasing the messages that waited"
RECENT_CANCEL = timedelta(hours=1)  # messages made by a creation job racing the cancel are caught then


@dataclass
class CampaignChange:
    campaign: Campaign
    changed: bool
    progress: dict[str, int] = field(default_factory=dict)
    cancelled_now: int = 0
    released_now: int = 0
    in_progress: bool = False  # a task goes on with the rest


def campaign_get(*, tenant: Tenant, public_id: str, lock: bool = False) -> Campaign:
    # Tenant in the filter: another tenant's campaign is simply not found.
    qs = Campaign.objects.filter(tenant=tenant, public_id=public_id)
    campaign = (qs.select_for_update() if lock else qs).first()
    if campaign is None:
        raise NotFoundError("No campaign with this id.")
    return campaign


def campaign_pause(*, tenant: Tenant, public_id: str, actor: str) -> CampaignChange:
    """Nothing more of it is handed to the provider: the next claim already excludes it, and paced
    messages waiting for their slot are held back by the send processes' view (<= 1 s old). The creation
    job goes on making its messages; they wait too."""
    now = timezone.now()
    with transaction.atomic():
        campaign = campaign_get(tenant=tenant, public_id=public_id, lock=True)
        if campaign.status == C.PAUSED:
            return CampaignChange(campaign, changed=False, progress=progress_read(campaign.pk))
        if campaign.status not in (C.CREATING, C.ACTIVE):
            raise ConflictError(
                f"Only a creating or active campaign can be paused; this one is {campaign.status}.",
                current_status=campaign.status,
            )
        _move(
            campaign,
            to_status=C.PAUSED,
            set_fields={"status_reason": f"paused by {actor}"[:255]},
            now=now,
        )
    log.info("campaign paused", extra={"campaign": campaign.public_id, "actor": actor})
    return CampaignChange(campaign, changed=True, progress=progress_read(campaign.pk))


def campaign_resume(*, tenant: Tenant, public_id: str, actor: str) -> CampaignChange:
    """Back to active (creating, if the creation job has not finished), and the messages that waited are
    due again at once."""
    now = timezone.now()
    with transaction.atomic():
        campaign = campaign_get(tenant=tenant, public_id=public_id, lock=True)
        if campaign.status in (C.CREATING, C.ACTIVE):
            return CampaignChange(campaign, changed=False, progress=progress_read(campaign.pk))
        if campaign.status != C.PAUSED:
            raise ConflictError(
                f"Only a paused campaign can be resumed; this one is {campaign.status}.",
                current_status=campaign.status,
            )
        _move(
            campaign,
            to_status=C.ACTIVE if campaign.made_at else C.CREATING,
            set_fields={"status_reason": RESUMING},
            now=now,
        )
        if campaign.status == C.CREATING:
            # A pause stops the creation job at its next batch (scheduling.campaigns.make); it goes on
            # from its checkpoint. Should a run still be going, the later one stops as "superseded".
            from scheduling.campaigns.service import campaign_make_enqueue

            pk = campaign.pk
            transaction.on_commit(lambda: campaign_make_enqueue(pk))
    log.info("campaign resumed", extra={"campaign": campaign.public_id, "actor": actor})
    released, done = waiting_release(campaign.pk, batches=REQUEST_BATCHES)
    if not done:
        _enqueue("scheduling.campaign_release", campaign.pk)
    campaign.refresh_from_db()
    return CampaignChange(
        campaign,
        changed=True,
        progress=progress_read(campaign.pk),
        released_now=released,
        in_progress=not done,
    )


def campaign_cancel(*, tenant: Tenant, public_id: str, actor: str) -> CampaignChange:
    """Cancelled for good: nothing more is made or submitted once this commits; every pending message is
    cancelled (``campaign_cancelled``), in batches. A repeat answers the progress so far (idempotent)."""
    now = timezone.now()
    with transaction.atomic():
        campaign = campaign_get(tenant=tenant, public_id=public_id, lock=True)
        if campaign.status == C.CANCELLED:
            progress = progress_read(campaign.pk)
            busy = any(progress.get(s) for s in PENDING)
            return CampaignChange(campaign, changed=False, progress=progress, in_progress=busy)
        if campaign.status not in (C.CREATING, C.ACTIVE, C.PAUSED):
            raise ConflictError(
                f"This campaign is already {campaign.status}: it can no longer be cancelled.",
                current_status=campaign.status,
            )
        _move(campaign, to_status=C.CANCELLED, set_fields={"status_reason": CANCELLING}, now=now)
    log.info("campaign cancelled", extra={"campaign": campaign.public_id, "actor": actor})
    cancelled, done = cancel_pending(campaign.pk, actor=actor, batches=REQUEST_BATCHES)
    if not done:
        _enqueue("scheduling.campaign_cancel", campaign.pk)
    campaign.refresh_from_db()
    return CampaignChange(
        campaign,
        changed=True,
        progress=progress_read(campaign.pk),
        cancelled_now=cancelled,
        in_progress=not done,
    )


def _move(campaign: Campaign, *, to_status: str, set_fields: dict, now: datetime) -> None:
    """The campaign's row is locked by the caller, so the move cannot lose; should it all the same,
    the caller's answer would describe a change that did not happen: a conflict instead."""
    if not campaign_transition(
        campaign, from_status=campaign.status, to_status=to_status, set_fields=set_fields, now=now
    ):
        current = Campaign.objects.filter(pk=campaign.pk).values_list("status", flat=True).first()
        raise ConflictError(
            f"The campaign changed meanwhile; it is now {current}.", current_status=current or ""
        )


def _enqueue(task: str, campaign_id: int) -> None:
    from celery import current_app as app  # config.celery's app, current once loaded

    transaction.on_commit(lambda: app.send_task(task, args=[campaign_id], queue="reconcile"))


def _batch_ids(campaign_id: int, status: str, *, reason: str = "") -> list[int]:
    """A batch of the campaign's messages in ``status`` (msg_campaign_status), locked SKIP LOCKED."""
    qs = Message.objects.filter(campaign_id=campaign_id, status=status)
    if reason:
        qs = qs.filter(reason_code=reason)
    return list(
        qs.select_for_update(skip_locked=True).order_by("-id").values_list("id", flat=True)[:BATCH_SIZE]
    )


def cancel_pending(
    campaign_id: int, *, actor: str = "system", batches: int | None = None, budget: float | None = None
) -> tuple[int, bool]:
    """Cancel the campaign's pending messages, one batch per transaction. Returns (cancelled, done).
    Resumable: it only ever looks at what is still pending, so a re-run after a crash goes on."""
    deadline = time.monotonic() + budget if budget else None
    total, runs = 0, 0
    for status in PENDING:
        while True:
            now = timezone.now()
            with transaction.atomic():
                ids = _batch_ids(campaign_id, status)
                moved = transitions.transition_many(
                    ids,
                    from_status=status,
                    to_status=Status.CANCELLED,
                    kind="cancelled",
                    actor=actor,
                    details={"reason": "campaign cancelled"},
                    set_fields=campaign_gate.CANCEL_FIELDS,
                    now=now,
                )
            runs += 1
            total += len(moved)
            if len(ids) < BATCH_SIZE:
                break
            if (batches is not None and runs >= batches) or (deadline and time.monotonic() > deadline):
                return total, False
    with transaction.atomic():
        Campaign.objects.filter(pk=campaign_id, status=C.CANCELLED, status_reason=CANCELLING).update(
            status_reason="cancelled"
        )
    return total, True


def waiting_release(
    campaign_id: int, *, batches: int | None = None, budget: float | None = None
) -> tuple[int, bool]:
    """Make the messages parked while the campaign was paused due now (the release step takes them on
    its next pass, with the usual gates). Returns (released, done)."""
    deadline = time.monotonic() + budget if budget else None
    total, runs = 0, 0
    for status in PENDING:
        while True:
            with transaction.atomic():
                # Paused again meanwhile: what is left waits for the next resume.
                if Campaign.objects.filter(pk=campaign_id, status=C.PAUSED).exists():
                    return total, True
                ids = _batch_ids(campaign_id, status, reason=campaign_gate.REASON_PAUSED)
                # run_after only: the message is still waiting, no status changes; the release writes
                # its "queued" entry as for any due message.
                moved = Message.objects.filter(
                    pk__in=ids, status=status, reason_code=campaign_gate.REASON_PAUSED
                ).update(run_after=timezone.now())
            runs += 1
            total += moved
            if len(ids) < BATCH_SIZE:
                break
            if (batches is not None and runs >= batches) or (deadline and time.monotonic() > deadline):
                return total, False
    Campaign.objects.filter(pk=campaign_id, status_reason=RESUMING).exclude(status=C.PAUSED).update(
        status_reason=""
    )
    return total, True


def campaigns_tick(*, now: datetime | None = None, budget: float = TASK_BUDGET_SECONDS) -> dict[str, int]:
    """The periodic pass: campaigns whose messages are all final become completed; a cancellation or a
    resume whose task was lost (a crash) goes on. Reads counters, never counts messages."""
    now = now or timezone.now()
    report = {"completed": 0, "cancelled": 0, "released": 0}
    active = list(
        Campaign.objects.filter(status=C.ACTIVE, made_at__isnull=False).values_list("id", flat=True)
    )
    for cid, progress in progress_read_many(active).items():
        if any(progress.get(s) for s in UNFINISHED):
            continue
        report["completed"] += campaign_transition(
            cid, from_status=C.ACTIVE, to_status=C.COMPLETED, set_fields={"status_reason": ""}, now=now
        )
    recent = Q(status_reason=CANCELLING) | Q(cancelled_at__gte=now - RECENT_CANCEL)
    for cid in list(Campaign.objects.filter(recent, status=C.CANCELLED).values_list("id", flat=True)):
        progress = progress_read(cid)
        if any(progress.get(s) for s in PENDING):
            report["cancelled"] += cancel_pending(cid, budget=budget)[0]
        else:
            Campaign.objects.filter(pk=cid, status_reason=CANCELLING).update(status_reason="cancelled")
    for cid in Campaign.objects.filter(status__in=[C.ACTIVE, C.CREATING], status_reason=RESUMING).values_list(
        "id", flat=True
    ):
        report["released"] += waiting_release(cid, budget=budget)[0]
    return report
