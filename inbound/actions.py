"""What a keyword does (docs/inbound.md, "Keywords and actions"), inside the transaction that processes its
inbound message, so an action, its answer and the message's record of them commit together or not at all.

- ``opt_out`` / ``opt_in``: the contact goes on (comes off) the tenant's suppression list for the sender
  it wrote to (delivery.guards.suppression, audited there; inbound.process changes the lists of the
  other tenants an operator shares that sender with); ``help`` is recorded there too.
- ``cancel``: the pending (scheduled or queued) messages of the schedule or campaign the replied-to message
  belongs to, for this contact and nothing else. A schedule has one recipient: when it is the contact's,
  the schedule itself is cancelled (scheduling.schedules.service.schedule_cancel: no further occurrences,
  its pending ones cancelled, a new version naming the actor ``keyword``).
- ``confirm``: a ``reply_confirmed`` entry on the replied-to message's timeline and the tenant's
  ``message.confirmed`` webhook (the outbox, as inbound.notify).

Each answers with a reply when there is a text (inbound.replies). Each returns what it changed
(``InboundMessage.action_result``: the audit the tenant and operators see).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from delivery.guards import suppression
from inbound import replies
from inbound.keywords import Match
from inbound.models import InboundMessage, KeywordAction
from receipts.models import WebhookDelivery
from scheduling.lifecycle import transitions
from scheduling.lifecycle.notes import event_record
from scheduling.lifecycle.reasons import ReasonCode
from scheduling.models import Message, Schedule, ScheduleStatus, Status
from scheduling.schedules.service import schedule_cancel
from smsgw.models import Tenant
from smsgw.values.timeutil import utc_text

ACTOR = replies.ACTOR
CONFIRMED_EVENT = "message.confirmed"
PENDING = (Status.SCHEDULED, Status.QUEUED)  # what a cancel still reaches (campaigns.control's rule)


@dataclass(frozen=True)
class Replied:
    """The message an inbound one answers (its in_reply_to), as the actions need it."""

    id: int
    public_id: str
    status: str
    schedule_id: int | None
    campaign_id: int | None


def keyword_apply(inbound: InboundMessage, match: Match, replied: Replied | None) -> dict:
    """Apply the keyword's action for the inbound message's tenant and send its answer; returns the
    action's result."""
    assert inbound.tenant_id is not None
    sender = inbound.sender_pool or inbound.to_number
    if match.action == KeywordAction.HELP:
        suppression.help_record(
            tenant_id=inbound.tenant_id, number=inbound.from_number, sender=sender, keyword=match.keyword[:16]
        )
        result: dict = {"recorded": True}
    elif match.action in (KeywordAction.OPT_OUT, KeywordAction.OPT_IN):
        change = (
            suppression.suppression_add
            if match.action == KeywordAction.OPT_OUT
            else suppression.suppression_remove
        )
        changed = change(
            tenant_id=inbound.tenant_id,
            number=inbound.from_number,
            sender=sender,
            source="inbound_keyword",
            actor="recipient",
            keyword=match.keyword[:16],
        )
        result = {"changed": changed, "sender": sender}
    elif match.action == KeywordAction.CANCEL:
        result = _cancel(inbound, match, replied)
    elif match.action == KeywordAction.CONFIRM:
        result = _confirm(inbound, match, replied, now=timezone.now())
    else:
        return {}
    # START (or YES) from a contact who had not opted out changes nothing: no default answer for it
    # ("Yes" to a reminder must not read "you are subscribed again"); a tenant's own text still goes.
    default = not (match.action == KeywordAction.OPT_IN and not result.get("changed"))
    result.update(
        replies.reply_send(
            inbound, action=match.action, keyword=match.keyword, rule_reply=match.reply, default=default
        )
    )
    return result


def _cancel(inbound: InboundMessage, match: Match, replied: Replied | None) -> dict:
    """Cancel what is still pending of the replied-to message's schedule or campaign, for this contact."""
    assert inbound.tenant_id is not None
    if replied is None or not (replied.schedule_id or replied.campaign_id):
        return {"cancelled": [], "count": 0, "note": "the replied-to message is no schedule's or campaign's"}
    contact = inbound.from_number
    details = {"inbound": inbound.public_id, "keyword": match.keyword, "in_reply_to": replied.public_id}
    if replied.schedule_id:
        schedule = Schedule.objects.only("public_id", "to", "status").get(pk=replied.schedule_id)
        if schedule.to == contact and schedule.status != ScheduleStatus.CANCELLED:
            tenant = Tenant.objects.get(pk=inbound.tenant_id)
            change = schedule_cancel(tenant=tenant, public_id=schedule.public_id, actor=ACTOR)
            # The rest: an occurrence whose recipient was edited to the contact (not the schedule's).
            rest = _pending_cancel(Message.objects.filter(schedule_id=schedule.pk, to=contact), details)
            cancelled = [*change.cancelled, *rest]
            return {"schedule": schedule.public_id, "schedule_cancelled": True, **_counted(cancelled)}
        cancelled = _pending_cancel(Message.objects.filter(schedule_id=schedule.pk, to=contact), details)
        return {"schedule": schedule.public_id, "schedule_cancelled": False, **_counted(cancelled)}
    campaign_id = replied.campaign_id
    assert campaign_id is not None
    cancelled = _pending_cancel(Message.objects.filter(campaign_id=campaign_id, to=contact), details)
    public = Message.objects.filter(pk=replied.id).values_list("campaign__public_id", flat=True).first()
    return {"campaign": public, **_counted(cancelled)}


def _counted(cancelled: list[str]) -> dict:
    return {"cancelled": cancelled, "count": len(cancelled)}


def _pending_cancel(messages, details: dict) -> list[str]:
    """Cancel these messages where still pending (each status's CAS; a send in progress wins): their
    public ids."""
    out: list[str] = []
    now = timezone.now()
    for status in PENDING:
        ids = list(messages.filter(status=status).order_by("id").values_list("id", flat=True))
        moved = transitions.transition_many(
            ids,
            from_status=status,
            to_status=Status.CANCELLED,
            kind="cancelled",
            actor=ACTOR,
            details={"reason": "the recipient replied with the cancel keyword", **details},
            set_fields={
                "run_after": None,
                "status_reason": f"cancelled by the recipient's reply {details['keyword']}"[:255],
                "reason_code": ReasonCode.CANCELLED_BY_REPLY,
            },
            returning=("id", "public_id"),
            now=now,
        )
        out += [r["public_id"] for r in moved]
    return out


def _confirm(inbound: InboundMessage, match: Match, replied: Replied | None, *, now: datetime) -> dict:
    """A confirmation on the replied-to message: its timeline and the tenant's webhook."""
    assert inbound.tenant_id is not None
    if replied is None:
        return {"confirmed": None, "note": "no message to confirm on this number pair"}
    details = {"inbound": inbound.public_id, "keyword": match.keyword}
    event_record(
        replied.id, kind="reply_confirmed", actor="recipient", details=details, status=replied.status
    )
    webhook_url = Tenant.objects.filter(pk=inbound.tenant_id).values_list("webhook_url", flat=True).first()
    webhook_id = ""
    if webhook_url:
        webhook_id = f"whcf_{secrets.token_hex(12)}"
        data = {
            "id": replied.public_id,
            "status": replied.status,
            "confirmed_by": inbound.public_id,
            "keyword": match.keyword,
            "from": inbound.from_number,
            "confirmed_at": utc_text(now),
        }
        WebhookDelivery.objects.create(
            webhook_id=webhook_id,
            tenant_id=inbound.tenant_id,
            message_id=replied.id,
            event_type=CONFIRMED_EVENT,
            payload={"type": CONFIRMED_EVENT, "timestamp": utc_text(now), "data": data},
            next_attempt_at=now,
            created_at=now,
        )
    return {"confirmed": replied.public_id, "webhook": webhook_id or None}
