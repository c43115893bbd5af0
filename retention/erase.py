"""Erase one person's number from one tenant's data, on request (``POST /v1/recipients/erase``;
docs/erasure.md). What it does, table by table:

- schedules addressed to the number: cancelled through the schedule service (their pending occurrences
  with them), then their number, body and metadata removed, and their version snapshots scrubbed;
- messages still to be sent to it (scheduled, queued): cancelled through the cancel service, then
  scrubbed like the final ones; a message the send worker holds at that moment (``sending``) cannot be
  cancelled or scrubbed yet: it is marked ``ContentRetention=discard`` / ``AddressRetention=obfuscate``,
  so that its content goes the moment it is sent and its number the moment it is final, and is counted
  ``messages_in_flight`` (a repeat of the erase once it is final finishes the rest);
- messages sent or final: their content removed (retention.content) with every copy in the timeline,
  attempts, receipts, webhook deliveries and opt-out signals, and a ``redacted`` timeline entry naming
  who; webhook deliveries whose message row is gone: their payload scrubbed of the number;
- history rows (retention.history): their content removed;
- campaign error rows quoting the number: masked; a campaign still being created whose stored recipient
  list holds the number: masked in place (same length, so no line moves), and the creation job then
  records that row as an invalid number and makes no message of it;
- provider opt-out signals for the number: masked;
- inbound messages from the number (what the person sent back, docs/inbound.md): their body emptied and
  the number masked, in the parts they were joined from too; their ``message.received`` webhook payloads
  are scrubbed with the other deliveries above (those naming the replied-to message with it, the others
  found by their text). One still pending (not processed yet, so no tenant's yet) is not found: a repeat
  of the erase once it is processed removes it.

The suppression list (and its change log) is left as it is: an opt-out must still be honoured after
every message to the person is gone. Another tenant's data is never read. The audit row says who, when
and how many rows of each table, never the number (not even a hash: a phone number's hash is reversed by
trying every number).

Bounded: each step reads at most ERASE_BATCH rows at a time and commits as it goes; a repeat (or a run
after a crash) finds what is left, so the final state is the same."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from datetime import datetime

from django.db import transaction
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from delivery.models import OptOutSignal
from inbound.models import InboundMessage
from receipts.models import WebhookDelivery
from retention.content import (
    INBOUND_TABLES,
    REMOVABLE,
    TABLES,
    history_content_remove,
    inbound_content_remove,
    masked,
    messages_content_remove,
    scrubbed,
)
from retention.models import MessageHistory, RetentionAction, RetentionAudit
from retention.requested import DISCARD, OBFUSCATE
from scheduling.campaigns.models import Campaign, CampaignError, CampaignUpload
from scheduling.messages.service import message_cancel
from scheduling.models import Message, Schedule, ScheduleStatus, ScheduleVersion, Status
from scheduling.schedules.service import schedule_cancel
from smsgw.domain_errors import ConflictError
from smsgw.models import Tenant

log = logging.getLogger(__name__)

# Rows read per step: one person has few messages, but a number that a tenant messages daily for years
# has thousands; each batch is its own short transaction, so nothing waits long on the erase.
ERASE_BATCH = 500
PENDING = (Status.SCHEDULED, Status.QUEUED)
COUNTS = (
    *TABLES,
    "messages_cancelled",
    "messages_in_flight",
    "message_history",
    "schedules",
    "schedule_versions",
    "campaign_errors",
    "campaign_uploads",
    *INBOUND_TABLES,
)


def recipient_erase(*, tenant: Tenant, number: str, actor: str) -> dict[str, int]:
    """Remove every trace of ``number`` (E.164, already normalised) from ``tenant``'s data; returns the
    rows changed per table (COUNTS), all zero for a repeat. Audited without the number."""
    now = timezone.now()
    counts: Counter[str] = Counter(dict.fromkeys(COUNTS, 0))
    _schedules_erase(tenant, number, actor, now, counts)
    _pending_cancel(tenant, number, actor, counts)
    _messages_erase(tenant, number, actor, now, counts)
    _history_erase(tenant, number, actor, now, counts)
    _orphan_webhooks_erase(tenant, number, counts)
    _campaigns_erase(tenant, number, counts)
    _signals_erase(tenant, number, counts)
    _inbound_erase(tenant, number, counts)
    result = {name: counts[name] for name in COUNTS}
    RetentionAudit.objects.create(
        tenant=tenant,
        action=RetentionAction.ERASE,
        actor=actor[:200],
        subject="",
        counts=result,
        created_at=now,
    )
    log.info("recipient erased", extra={"actor": actor, "rows": sum(result.values())})
    return result


def _ids(qs: QuerySet, size: int = ERASE_BATCH) -> Iterator[list[int]]:
    """The ids of ``qs`` in ascending batches (keyset: each batch starts after the last one's id)."""
    last = 0
    while True:
        batch = list(qs.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)[:size])
        if not batch:
            return
        yield batch
        last = batch[-1]


def _schedules_erase(tenant: Tenant, number: str, actor: str, now: datetime, counts: Counter) -> None:
    """Cancel each schedule addressed to the number (its pending occurrences go with it), then remove its
    content; its version snapshots keep their history with the content scrubbed."""
    for batch in _ids(Schedule.objects.filter(tenant=tenant, to=number)):
        for schedule in Schedule.objects.filter(pk__in=batch).only("pk", "public_id", "status"):
            if schedule.status not in (ScheduleStatus.CANCELLED, ScheduleStatus.ENDED):
                schedule_cancel(tenant=tenant, public_id=schedule.public_id, actor=actor)
        with transaction.atomic():
            counts["schedules"] += Schedule.objects.filter(pk__in=batch).update(
                to=masked(number), body="", metadata={}, updated_at=now
            )
            versions = []
            for version in ScheduleVersion.objects.filter(schedule_id__in=batch).only("pk", "definition"):
                clean = scrubbed(version.definition, [number])
                if clean != version.definition:
                    version.definition = clean
                    versions.append(version)
            ScheduleVersion.objects.bulk_update(versions, ["definition"], batch_size=ERASE_BATCH)
            counts["schedule_versions"] += len(versions)


def _pending_cancel(tenant: Tenant, number: str, actor: str, counts: Counter) -> None:
    """Messages still to be sent to the number: cancelled one by one through the cancel service (its
    timeline entry, campaign counters, quota give-back and webhook as for any cancel). One the send
    worker took meanwhile is marked to lose its content as soon as it may (retention.requested)."""
    pending = Message.objects.filter(tenant=tenant, to=number, status__in=[*PENDING, Status.SENDING])
    for batch in _ids(pending):
        for pk, public_id, status in Message.objects.filter(pk__in=batch).values_list(
            "pk", "public_id", "status"
        ):
            if status in PENDING:
                try:
                    message_cancel(tenant=tenant, public_id=public_id, actor=actor)
                    counts["messages_cancelled"] += 1
                    continue
                except ConflictError:
                    pass  # sent meanwhile (scrubbed with the final ones) or sending (below)
            marked = Message.objects.filter(pk=pk, status=Status.SENDING).update(
                content_retention=DISCARD, address_retention=OBFUSCATE
            )
            counts["messages_in_flight"] += marked


def _messages_erase(tenant: Tenant, number: str, actor: str, now: datetime, counts: Counter) -> None:
    """The sent and final messages to the number (each gets a ``redacted`` entry naming the actor), and
    the ones the tenant deleted through the Twilio API: message_delete masked their row but not the
    copies (webhook payloads), which hold the number under ``to``/``To`` and are masked here."""
    removable = Message.objects.filter(tenant=tenant, to=number, status__in=REMOVABLE)
    deleted = Message.objects.filter(tenant=tenant, to=masked(number), deleted_at__isnull=False)
    for qs in (removable, deleted):
        for batch in _ids(qs):
            for table, n in messages_content_remove(message_ids=batch, now=now, actor=actor).items():
                counts[table] += n


def _history_erase(tenant: Tenant, number: str, actor: str, now: datetime, counts: Counter) -> None:
    rows = MessageHistory.objects.filter(tenant_id=tenant.pk, to=number)
    for batch in _ids(rows):
        done = history_content_remove(ids=batch, now=now, actor=actor)
        counts["message_history"] += done["message_history"]


def _orphan_webhooks_erase(tenant: Tenant, number: str, counts: Counter) -> None:
    """Webhook deliveries that no longer name a message (its row removed: ``on_delete=SET_NULL``) and
    still quote the number in their payload. Found by the payload's text, in keyset batches."""
    orphans = (
        WebhookDelivery.objects.filter(tenant=tenant, message__isnull=True)
        .annotate(text=Cast("payload", TextField()))
        .filter(text__contains=number)
    )
    for batch in _ids(orphans):
        changed = []
        for row in WebhookDelivery.objects.filter(pk__in=batch).only("pk", "payload", "history"):
            row.payload, row.history = scrubbed(row.payload, [number]), scrubbed(row.history, [number])
            changed.append(row)
        WebhookDelivery.objects.bulk_update(changed, ["payload", "history"])
        counts["webhook_deliveries"] += len(changed)


def _campaigns_erase(tenant: Tenant, number: str, counts: Counter) -> None:
    """Error rows keep the value as the tenant wrote it (``+1 415-555-0123`` too): the candidates are the
    rows holding the number's last four digits, and each is compared by its digits."""
    digits = number.lstrip("+")
    errors = CampaignError.objects.filter(campaign__tenant=tenant, phone__contains=digits[-4:])
    for batch in _ids(errors):
        with transaction.atomic():
            for error in CampaignError.objects.filter(pk__in=batch).only("pk", "phone", "message"):
                if "".join(c for c in error.phone if c.isdigit()).endswith(digits) and "*" not in error.phone:
                    error.phone = masked(number)
                    error.message = scrubbed(error.message, [number])
                    error.save(update_fields=["phone", "message"])
                    counts["campaign_errors"] += 1
    building = Campaign.objects.filter(tenant=tenant, upload_chunks__isnull=False).distinct()
    for campaign_id in building.values_list("pk", flat=True):
        counts["campaign_uploads"] += _upload_mask(campaign_id, number)


def _upload_mask(campaign_id: int, number: str) -> int:
    """Mask the number in a campaign's stored recipient list, written as E.164 or as bare digits, two
    chunks in memory at a time (a number may straddle two). The masked form has the number's length, so
    every line and chunk keeps its offsets. Returns the chunks changed."""
    forms = [(number.encode(), masked(number).encode()), (number[1:].encode(), masked(number)[1:].encode())]
    changed: set[int] = set()
    chunks = CampaignUpload.objects.filter(campaign_id=campaign_id)
    with transaction.atomic():
        previous: CampaignUpload | None = None
        # One chunk loaded at a time (a list is up to hundreds of 1 MB chunks), locked as it is read.
        for seq in list(chunks.order_by("seq").values_list("seq", flat=True)):
            chunk = chunks.select_for_update().get(seq=seq)
            head = bytes(previous.data) if previous is not None else b""
            data = head + bytes(chunk.data)
            for written, hidden in forms:
                data = data.replace(written, hidden)
            if previous is not None and data[: len(head)] != head:
                previous.data = data[: len(head)]
                previous.save(update_fields=["data"])
                changed.add(previous.seq)
            if data[len(head) :] != bytes(chunk.data):
                chunk.data = data[len(head) :]
                chunk.save(update_fields=["data"])
                changed.add(chunk.seq)
            previous = chunk
    return len(changed)


def _signals_erase(tenant: Tenant, number: str, counts: Counter) -> None:
    signals = OptOutSignal.objects.filter(tenant_id=tenant.pk, to=number)
    for batch in _ids(signals):
        counts["opt_out_signals"] += OptOutSignal.objects.filter(pk__in=batch).update(to=masked(number))


def _inbound_erase(tenant: Tenant, number: str, counts: Counter) -> None:
    """What the person sent the tenant (inbound_tenant_contact: tenant, from_number): content removed as
    at the content horizon (retention.content). Their webhook deliveries were scrubbed by the steps
    above: they name the message replied to (``_messages_erase``, ``_history_erase``) or none
    (``_orphan_webhooks_erase``)."""
    for batch in _ids(InboundMessage.objects.filter(tenant=tenant, from_number=number)):
        counts.update(inbound_content_remove(inbound_ids=batch))
