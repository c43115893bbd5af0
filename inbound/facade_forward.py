"""Twilio programs work unchanged (docs/inbound.md, "Twilio programs"): a message that comes in to a number
whose ``SmsUrl`` the tenant set through the Twilio-compatible IncomingPhoneNumbers resource
(scheduling.facade.numbers) is forwarded there as Twilio forwards it, and the program's TwiML answer is
sent back through smsgw.

- ``incoming_forward``: in the transaction that processes the inbound message (inbound.process), one row in
  the tenant-webhook outbox (receipts.webhooks), so it is made once and retried, SSRF-guarded and
  dead-lettered like every other notification: Twilio's form, ``X-Twilio-Signature`` with the tenant's
  callback signing key (what ``twilio.request_validator.RequestValidator`` checks), its
  ``I-Twilio-Idempotency-Token`` the row's stable webhook id.
- ``twiml_answer``: the outbox hands it the program's answer (smsgw.stages.webhook_answer) before it marks
  the row delivered. Each ``<Message>`` (inbound.twiml) becomes a message of the tenant's, created as the
  API creates one (quota, suppression, the sender check, timeline), from the number written to, to the
  contact, with an idempotency key of the webhook id and the reply's place: a retried or replayed
  delivery sends nothing twice.
"""

from __future__ import annotations

import logging
import secrets
from datetime import datetime

from inbound.models import InboundMessage
from inbound.twiml import Malformed, twiml_parse
from receipts.models import WebhookDelivery
from receipts.webhooks import INCOMING_FORWARD
from scheduling.facade import resources as facade
from scheduling.messages import service
from smsgw.domain_errors import DomainError, InvalidInput
from smsgw.models import SenderKind, Tenant, TenantSender

log = logging.getLogger(__name__)

ACTOR = "twiml"


def incoming_forward(inbound: InboundMessage, now: datetime) -> None:
    """Enqueue the forward of a routed inbound message to its number's SmsUrl, if the number has one."""
    if inbound.tenant_id is None:
        return
    sender = (
        TenantSender.objects.filter(
            tenant_id=inbound.tenant_id, kind=SenderKind.NUMBER, value=inbound.to_number
        )
        .exclude(sms_url="")
        .order_by("pk")
        .first()
    )
    if sender is None:
        return
    account_sid = (
        Tenant.objects.filter(pk=inbound.tenant_id).values_list("facade_account_sid", flat=True).get()
    )
    params = facade.incoming_params(
        public_id=inbound.public_id,
        account_sid=account_sid,
        from_=inbound.from_number,
        to=inbound.to_number,
        body=inbound.body,
        segments=inbound.segments,
        pool=inbound.sender_pool,
    )
    WebhookDelivery.objects.create(
        webhook_id=f"whtw_{secrets.token_hex(12)}",
        tenant_id=inbound.tenant_id,
        event_type=INCOMING_FORWARD,
        payload={
            "url": sender.sms_url,
            "method": sender.sms_method,
            "params": params,
            "inbound": inbound.public_id,
        },
        next_attempt_at=now,
        created_at=now,
    )


def twiml_answer(delivery: WebhookDelivery, answer: bytes) -> str:
    """Send the replies a delivered forward's answer asks for; what was done, for the delivery's history
    (no text, no number: the history is shown to operators)."""
    try:
        twiml = twiml_parse(answer)
    except Malformed as exc:
        log.warning("webhook %s: its TwiML answer was not taken (%s)", delivery.webhook_id, exc)
        return f"TwiML not taken: {exc}"
    if twiml.ignored:
        log.info("webhook %s: TwiML left out: %s", delivery.webhook_id, ", ".join(sorted(set(twiml.ignored))))
    params = delivery.payload["params"]
    notes = []
    for index, reply in enumerate(twiml.replies):
        data = {
            "to": reply.to or params["From"],
            "from": reply.from_ or params["To"],
            "body": reply.body,
            "metadata": {"in_reply_to": delivery.payload.get("inbound", "")},
        }
        try:
            message, created = service.message_create(
                tenant=delivery.tenant,
                actor=ACTOR,
                data=data,
                idempotency_key=f"twiml:{delivery.webhook_id}:{index}",
            )
        except InvalidInput as exc:
            notes.append(f"<Message> {index + 1} refused ({exc.field}: {exc.reason or 'invalid'})")
            continue
        except DomainError as exc:
            notes.append(f"<Message> {index + 1} refused ({type(exc).__name__})")
            continue
        notes.append(f"<Message> {index + 1}: {message.public_id}{'' if created else ' (already sent)'}")
    if twiml.ignored:
        notes.append(f"left out: {', '.join(sorted(set(twiml.ignored)))}")
    return "; ".join(notes) or "TwiML: no <Message>"
