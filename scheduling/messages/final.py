"""What a tenant or an operator does to a message that has left the gateway: redact its content, delete it
(the Twilio-compatible API), or send a dead-lettered one again (replay). None of them bypasses the
lifecycle's one writer (scheduling.lifecycle.transitions)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from scheduling.lifecycle import transitions
from scheduling.lifecycle.reasons import ReasonCode
from scheduling.messages.selectors import message_read
from scheduling.messages.service import message_get
from scheduling.models import TERMINAL_STATUSES, Message, Status
from smsgw import stages, tracing
from smsgw.domain_errors import ConflictError, NotFoundError
from smsgw.models import Tenant
from smsgw.values.phone import mask

log = logging.getLogger(__name__)


def message_redact(*, tenant: Tenant, public_id: str, actor: str) -> Message:
    """Twilio's ``update(body="")``: the message's content (body, metadata, the full number, and their
    copies in its timeline, attempts, receipts and webhooks) removed at once, with a ``redacted`` entry
    naming who, and audited: the retention room's redaction (``smsgw.stages.message_redact``,
    docs/erasure.md). ConflictError while it is still to be sent."""
    message = message_read(tenant=tenant, public_id=public_id)  # live, or moved to history
    stages.message_redact()(tenant=tenant, public_id=message.public_id, actor=actor)
    return message_read(tenant=tenant, public_id=message.public_id)


def message_delete(*, tenant: Tenant, public_id: str, actor: str) -> None:
    """Twilio's ``delete()`` of a message in a final status: it leaves the tenant's view (its API answers
    404 for it, lists leave it out) and its content is erased (body and metadata blanked, the recipient
    masked), but the row, its timeline and its attempts stay as the audit trail, with a ``deleted`` entry
    naming who deleted it and when; operators still find it in the admin. Not a status change (the
    lifecycle's one writer is not bypassed): a deleted message is already final and stays so.
    ConflictError before it is final: its delivery is not complete. A message that has moved to history
    (final long ago) is marked deleted there, its content removed (retention.reader)."""
    try:
        message = message_get(tenant=tenant, public_id=public_id)
    except NotFoundError:
        if stages.message_history().delete(tenant_id=tenant.pk, public_id=public_id, actor=actor):
            log.info("message deleted", extra={"message_id": public_id, "actor": actor})
            return
        raise
    now = timezone.now()
    with transaction.atomic():
        deleted = Message.objects.filter(
            pk=message.pk, status__in=TERMINAL_STATUSES, deleted_at__isnull=True
        ).update(deleted_at=now, body="", metadata={}, to=mask(message.to)[:20], updated_at=now)
        if deleted:
            transitions.event_record(message.pk, kind="deleted", actor=actor, status=message.status)
    if not deleted:
        message.refresh_from_db(fields=["status"])
        raise ConflictError(
            f"A message can be deleted once its delivery is complete; this one is {message.status}.",
            current_status=message.status,
        )
    log.info(
        "message deleted",
        extra={**tracing.log_fields(message.public_id, message.trace_context), "actor": actor},
    )


def message_replay(*, tenant: Tenant, public_id: str, actor: str) -> Message:
    """Send a dead-lettered (``failed``) message again: ``failed`` -> ``queued`` with a fresh attempt
    budget, published by the next sweep like any released message. A validity window that has run out
    since is granted again from now (the same length as the original one), or the send worker would
    expire the replay at once. Raises ConflictError when the message is not ``failed`` (any more)."""
    message = message_get(tenant=tenant, public_id=public_id)
    if message.reason_code == ReasonCode.QUOTA_EXCEEDED:
        # It failed on the tenant's daily quota (policy "fail"): `queued` is past the quota gate, so a
        # replay would send it over the quota the tenant chose to enforce.
        raise ConflictError(
            "It failed on the tenant's daily quota; a replay would send it past that quota.",
            current_status=message.status,
        )
    now = timezone.now()
    set_fields: dict[str, Any] = {
        "run_after": now,
        "attempt_count": 0,
        "reason_code": "",
        "status_reason": "replayed by an operator",
    }
    details: dict[str, Any] = {
        "previous_reason": message.status_reason[:200],
        "error_code": message.error_code,
    }
    if message.expires_at <= now:
        set_fields["expires_at"] = now + max(message.expires_at - message.due_at, timedelta(minutes=5))
        details["new_expires_at"] = set_fields["expires_at"].isoformat()
    result = transitions.transition(
        message.pk,
        from_statuses=[Status.FAILED],
        to_status=Status.QUEUED,
        kind="replayed",
        actor=actor,
        details=details,
        set_fields=set_fields,
        expected_version=message.version,
        now=now,
    )
    if not result.won:
        raise ConflictError(
            f"Only a failed message can be replayed; this one is {result.status}.",
            current_status=result.status,
        )
    message.refresh_from_db()
    return message
