"""Twilio's per-message privacy controls, honoured (docs/erasure.md): ``ContentRetention=discard`` empties
the body as soon as the provider has taken the message (``sent``, or any final status it reaches without
being sent), ``AddressRetention=obfuscate`` masks the number, in the message and every row that copies it,
once the message is final. Set at creation by the Twilio-compatible API (scheduling.facade.requests) in
the message's own columns, applied by a status listener (smsgw.stages.status_listeners, config.wiring)
inside the transaction of the change, after the webhook outbox: the notification written for that
change is masked with the rest before it ever leaves."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q
from django.db.models.expressions import RawSQL

from retention.content import REMOVABLE, messages_address_mask
from scheduling.models import TERMINAL_STATUSES, Message
from smsgw.runtime.db import PgInts, is_postgres

DISCARD = "discard"
OBFUSCATE = "obfuscate"


def retention_requested_apply(
    ids: list[int], from_status: str, to_status: str, kind: str, now: datetime
) -> None:
    """Status listener. One query for a batch reaching ``sent`` or a final status, none for any other
    change: it reads only the few rows that asked for something (the rest do not match its filter)."""
    if to_status not in REMOVABLE:
        return
    wanted = Q(content_retention=DISCARD) & ~Q(body="")
    final = to_status in TERMINAL_STATUSES
    if final:
        wanted |= Q(address_retention=OBFUSCATE) & ~Q(to__contains="*")
    if is_postgres():
        # One array parameter, as the webhook outbox does: the same statement text whatever the batch size.
        qs = Message.objects.filter(pk__in=RawSQL("SELECT unnest(%s::bigint[])", [PgInts(ids)]))
    else:
        qs = Message.objects.filter(pk__in=ids)
    rows = list(qs.filter(wanted).values_list("pk", "content_retention", "address_retention"))
    if not rows:
        return
    discard = [pk for pk, content, _ in rows if content == DISCARD]
    if discard:
        Message.objects.filter(pk__in=discard).update(body="", updated_at=now)
    obfuscate = [pk for pk, _, address in rows if final and address == OBFUSCATE]
    if obfuscate:
        messages_address_mask(message_ids=obfuscate, now=now)
