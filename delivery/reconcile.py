"""Reconciling sends whose outcome is unknown (SPEC §5.3).

A `sending` message whose lease expired had an attempt that may or may not have reached the provider:
the worker died mid-call, or the call timed out. Sending again blindly could deliver twice, so the
provider is asked first: by the provider id when we stored one, otherwise by listing what it accepted
for this recipient and sender since the attempt began and matching the body. Only when the provider
has no such message is a retry declared safe.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from delivery.models import Attempt, AttemptOutcome
from delivery.providers import get_adapter
from delivery.retry import retry_decide
from scheduling import transitions
from scheduling.models import Message, Status

log = logging.getLogger(__name__)

# Provider clocks and ours differ; look a little before the attempt began.
CLOCK_SKEW = timedelta(seconds=120)


def message_reconcile(message_id: int) -> str:
    """Returns what was decided: "found", "absent", "not_sending" or "lookup_failed"."""
    adapter = get_adapter()
    msg = Message.objects.filter(pk=message_id).first()
    if msg is None or msg.status != Status.SENDING:
        return "not_sending"
    attempt = msg.attempts.order_by("-number").first()
    try:
        found = None
        if attempt and attempt.provider_message_id:
            found = adapter.fetch(attempt.provider_message_id)
        else:
            since = (attempt.started_at if attempt else msg.sending_at or msg.created_at) - CLOCK_SKEW
            candidates = [
                c
                for c in adapter.find_submissions(
                    to=msg.to,
                    from_number=msg.from_number,
                    messaging_service_sid=msg.messaging_service_sid,
                    since=since,
                )
                if c.body == msg.body
            ]
            # A sid already owned by another message is that message's submission (same text sent
            # twice to one number), not ours.
            owned = set(
                Message.objects.filter(
                    provider=adapter.name, provider_message_id__in=[c.provider_message_id for c in candidates]
                )
                .exclude(pk=msg.pk)
                .values_list("provider_message_id", flat=True)
            )
            free = sorted(
                (c for c in candidates if c.provider_message_id not in owned),
                key=lambda c: c.date_created or timezone.now(),
            )
            found = free[0] if free else None
    except Exception:  # the provider is down or erroring: stay `sending`, the lease brings us back
        log.warning("reconcile: provider look-up failed for message %s", msg.public_id, exc_info=True)
        transitions.event_record(
            msg.pk,
            kind="reconcile_deferred",
            status=msg.status,
            details={"reason": "provider look-up failed; will retry"},
        )
        return "lookup_failed"

    now = timezone.now()
    with transaction.atomic():
        if found is not None:
            result = transitions.transition(
                msg.pk,
                from_statuses=[Status.SENDING],
                to_status=Status.SENT,
                kind="reconciled_found",
                expected_version=msg.version,
                details={"provider_message_id": found.provider_message_id, "provider_status": found.status},
                set_fields={
                    "provider_message_id": found.provider_message_id,
                    "provider_status": found.status,
                    "sent_at": found.date_created or now,
                    "run_after": None,
                    "status_reason": "",
                },
                now=now,
            )
            if result.won and attempt:
                Attempt.objects.filter(pk=attempt.pk).update(
                    outcome=AttemptOutcome.RECONCILED_FOUND,
                    provider_message_id=found.provider_message_id,
                    finished_at=attempt.finished_at or now,
                )
            return "found" if result.won else "not_sending"
        decision = retry_decide(
            attempt_number=msg.attempt_count,
            now=now,
            first_due=msg.due_at,
            expires_at=msg.expires_at,
        )
        if decision.retry:
            # The provider has no record: resending is safe. Retry immediately (the backoff already ran
            # as the lease) rather than adding a second delay.
            result = transitions.transition(
                msg.pk,
                from_statuses=[Status.SENDING],
                to_status=Status.QUEUED,
                kind="reconciled_absent",
                expected_version=msg.version,
                details={"decision": "provider has no such message; retry is safe"},
                set_fields={"run_after": now, "status_reason": "reconciled: not at provider, retrying"},
                now=now,
            )
        else:
            result = transitions.transition(
                msg.pk,
                from_statuses=[Status.SENDING],
                to_status=Status.FAILED,
                kind="failed",
                expected_version=msg.version,
                details={"dead_letter": True, "reason": decision.reason},
                set_fields={"failed_at": now, "run_after": None, "status_reason": decision.reason},
                now=now,
            )
        if result.won and attempt:
            Attempt.objects.filter(pk=attempt.pk).update(
                outcome=AttemptOutcome.RECONCILED_ABSENT, finished_at=attempt.finished_at or now
            )
    return "absent" if result.won else "not_sending"
