"""Remove one message's content at once, on request (docs/erasure.md): ``POST /v1/messages/{id}/redact``
and the Twilio-compatible ``Body=""`` (which reaches this room through ``smsgw.stages.message_redact``).
Wherever the message lives, in the operational tables or already in history; audited in RetentionAudit
(who, when, how many rows per table), never what was removed."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from retention.content import REMOVABLE, history_content_remove, messages_content_remove
from retention.models import MessageHistory, RetentionAction, RetentionAudit
from scheduling.facade.resources import public_id_of
from scheduling.models import Message
from smsgw.domain_errors import ConflictError, NotFoundError
from smsgw.models import Tenant

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Redaction:
    public_id: str
    status: str
    place: str  # "live" or "history": where the message was found
    counts: dict[str, int]


def message_redact(*, tenant: Tenant, public_id: str, actor: str) -> Redaction:
    """Remove the content of the tenant's message ``public_id`` (or its ``SM`` SID) now. NotFoundError
    for an unknown id or another tenant's; ConflictError while it is still to be sent (the send worker
    needs its body and number). A repeat changes nothing and is audited with zero counts."""
    if public_id.startswith("SM"):
        public_id = public_id_of(public_id) or public_id
    now = timezone.now()
    # Twice at most: a message the history move takes between the two reads is found there next time.
    for _ in range(2):
        live = (
            Message.objects.filter(tenant=tenant, public_id=public_id, deleted_at__isnull=True)
            .values("pk", "status")
            .first()
        )
        if live is not None:
            done = _live_redact(tenant, public_id, live["pk"], live["status"], actor, now)
            if done is not None:
                return done
            continue  # moved to history meanwhile
        row = (
            MessageHistory.objects.filter(tenant_id=tenant.pk, public_id=public_id, deleted=False)
            .values("pk", "status")
            .first()
        )
        if row is not None:
            with transaction.atomic():
                counts = history_content_remove(ids=[row["pk"]], now=now, actor=actor)
                return _audited(tenant, public_id, row["status"], "history", counts, actor, now)
        break
    raise NotFoundError("No message with this id.")


def _conflict(status: str) -> ConflictError:
    return ConflictError(
        f"The content can be removed once the message has been sent; this one is {status}.",
        current_status=status,
    )


def _live_redact(
    tenant: Tenant, public_id: str, pk: int, status: str, actor: str, now: datetime
) -> Redaction | None:
    """The removal and its audit in one transaction; None when the row left for history meanwhile."""
    if status not in REMOVABLE:
        raise _conflict(status)
    with transaction.atomic():
        counts = messages_content_remove(message_ids=[pk], now=now, actor=actor)
        current = Message.objects.filter(pk=pk).values_list("status", flat=True).first()
        if current is None:
            return None
        if current not in REMOVABLE:
            # Taken back by the send worker between the read and the removal (sent -> queued after a
            # resendable failure): nothing was removed, and the answer says why.
            raise _conflict(current)
        return _audited(tenant, public_id, current, "live", counts, actor, now)


def _audited(
    tenant: Tenant, public_id: str, status: str, place: str, counts: dict[str, int], actor: str, now: datetime
) -> Redaction:
    RetentionAudit.objects.create(
        tenant=tenant,
        action=RetentionAction.REDACT,
        actor=actor[:200],
        subject=public_id,
        counts=counts,
        created_at=now,
    )
    log.info("message redacted", extra={"message_id": public_id, "actor": actor, "place": place})
    return Redaction(public_id=public_id, status=status, place=place, counts=counts)


def message_redact_slot(*, tenant: Tenant, public_id: str, actor: str) -> dict[str, int]:
    """``smsgw.stages.message_redact``: the Twilio-compatible ``Body=""``."""
    return message_redact(tenant=tenant, public_id=public_id, actor=actor).counts
