"""The inbound processor (the ``inbound.process`` tick, on its own queue): each stored inbound message is
worked out once, in one transaction with its row locked, so a crash leaves it pending for the next pass
and two processors never take the same one (SKIP LOCKED):

1. its tenant: the owner of the number (or pool) it was sent to (smsgw.tenancy.senders). None owns it:
   ``unrouted``, kept and shown to operators (jasmin #531 answered the carrier OK and lost such messages);
2. the message it answers (``in_reply_to``): the last one the tenant sent on the same number pair, which
   gets a ``reply_received`` entry on its timeline;
3. its keyword and the keyword's action (inbound.keywords, inbound.actions), or a near miss flagged for
   review;
4. the tenant's ``message.received`` webhook (inbound.notify), in the same transaction.

A message whose processing raises is put back with a growing delay and the others go on."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from delivery.guards import suppression
from delivery.models import SuppressionSource
from inbound import actions, facade_forward, notify
from inbound.actions import Replied
from inbound.keywords import BUILT_IN, Match, first_word, keyword_match
from inbound.models import InboundMessage, InboundState, KeywordAction, KeywordRule
from inbound.parts import parts_join_due
from receipts.models import WebhookDelivery
from scheduling.lifecycle.notes import events_record_many
from scheduling.models import Message
from smsgw.channels import DEFAULT_CHANNEL, AddressError
from smsgw.models import Tenant, TenantSender
from smsgw.observability import events

log = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 300


@dataclass(frozen=True)
class Route:
    tenant_id: int
    webhook_url: str
    owners: tuple[int, ...]  # every tenant that owns the number (an operator may share one)


@dataclass
class Batch:
    """What a batch's messages share, read once for the whole batch (a query a message cost about 10 ms
    each at 100 replies a second, more than a processor had): the owners of every receiving number, the
    owners' webhooks, the keywords their own rules name, and the numbers with a Twilio SmsUrl."""

    now: datetime
    owners: dict[str, list[int]] = field(default_factory=dict)
    webhooks: dict[int, str] = field(default_factory=dict)
    rule_keywords: set[tuple[int, str]] = field(default_factory=set)
    forwards: set[tuple[int, str]] = field(default_factory=set)
    deliveries: list[WebhookDelivery] = field(default_factory=list)
    timeline: list[tuple[int, str, str, dict]] = field(default_factory=list)
    forward: list[InboundMessage] = field(default_factory=list)

    @classmethod
    def load(cls, claimed: list[InboundMessage], now: datetime) -> Batch:
        batch = cls(now=now)
        values = {v for m in claimed for v in (m.to_number, m.sender_pool) if v}
        for value, tenant_id in TenantSender.objects.filter(value__in=values).values_list(
            "value", "tenant_id"
        ):
            batch.owners.setdefault(value, []).append(tenant_id)
        tenant_ids = {t for ids in batch.owners.values() for t in ids}
        batch.webhooks = dict(Tenant.objects.filter(pk__in=tenant_ids).values_list("pk", "webhook_url"))
        batch.rule_keywords = set(
            KeywordRule.objects.filter(tenant_id__in=tenant_ids).values_list("tenant_id", "keyword")
        )
        batch.forwards = set(
            TenantSender.objects.filter(tenant_id__in=tenant_ids, value__in=values)
            .exclude(sms_url="")
            .values_list("tenant_id", "value")
        )
        return batch

    def owners_of(self, inbound: InboundMessage) -> list[int]:
        found = {t for v in (inbound.to_number, inbound.sender_pool) if v for t in self.owners.get(v, [])}
        return sorted(found)


def inbound_process_due(*, limit: int | None = None, now: datetime | None = None) -> int:
    """Join the long messages whose parts are in, then process up to ``limit`` pending messages: each
    worked out on its own (one that raises is put back and the rest go on), their rows, timeline
    entries and webhooks written together at the end of the one transaction."""
    now = now or timezone.now()
    limit = limit or settings.INBOUND_BATCH_SIZE
    parts_join_due(now)
    with transaction.atomic():
        claimed = list(
            InboundMessage.objects.select_for_update(skip_locked=True)
            .filter(state=InboundState.PENDING, next_try_at__lte=now)
            .order_by("next_try_at", "id")[:limit]
        )
        if not claimed:
            return 0
        batch = Batch.load(claimed, now)
        done = []
        for inbound in claimed:
            try:
                _process(inbound, batch)
            except Exception:
                log.exception(
                    "inbound %s not processed (try %d): put back", inbound.public_id, inbound.tries + 1
                )
                _put_back(inbound, now)
                continue
            done.append(inbound)
        InboundMessage.objects.bulk_update(done, PROCESSED_FIELDS)
        events_record_many(batch.timeline, actor="recipient", now=now)
        WebhookDelivery.objects.bulk_create(batch.deliveries)
        for inbound in batch.forward:
            facade_forward.incoming_forward(inbound, now)
    return len(claimed)


PROCESSED_FIELDS = [
    "tenant",
    "from_number",
    "conversation",
    "processed_at",
    "state",
    "in_reply_to",
    "keyword",
    "needs_review",
    "action",
    "action_result",
]


def inbound_process_for(seconds: float, *, idle_sleep: float = 0.05) -> int:
    """Process batches for ``seconds``, as the receipt processor does (receipts.processor): a batch that
    was not full means it has caught up, so it waits ``idle_sleep`` before the next claim."""
    deadline = time.monotonic() + seconds
    total = 0
    limit = settings.INBOUND_BATCH_SIZE
    while time.monotonic() < deadline:
        n = inbound_process_due(limit=limit)
        total += n
        if n < limit:
            time.sleep(idle_sleep)
    return total


def _put_back(inbound: InboundMessage, now: datetime) -> None:
    tries = inbound.tries + 1
    delay = min(MAX_BACKOFF_SECONDS, 2**tries)
    InboundMessage.objects.filter(pk=inbound.pk).update(
        tries=tries, next_try_at=now + timedelta(seconds=delay)
    )


def _contact(raw: str) -> str:
    """The sender as E.164 when it is a number; an alphanumeric sender stays as it came."""
    try:
        return DEFAULT_CHANNEL.address(raw)
    except AddressError:
        return raw


def _route(inbound: InboundMessage, contact: str, batch: Batch) -> Route | None:
    """The tenant that owns the receiving number or pool. Where an operator shares one number between
    tenants, the one that last sent to this contact on it; else the first owner."""
    owners = batch.owners_of(inbound)
    if not owners:
        return None
    tenant_id = owners[0]
    if len(owners) > 1:
        last = (
            _pair_messages(owners, contact, inbound)
            .order_by("-sent_at")
            .values_list("tenant_id", flat=True)
            .first()
        )
        tenant_id = last or tenant_id
    return Route(tenant_id=tenant_id, webhook_url=batch.webhooks.get(tenant_id, ""), owners=tuple(owners))


def _pair_messages(tenant_ids: list[int], contact: str, inbound: InboundMessage):
    """The tenants' messages sent on this number pair (served by msg_tenant_recipient: tenant, to, -id),
    within the reply window before the reply came."""
    ours = Q(from_number=inbound.to_number)
    if inbound.sender_pool:
        ours |= Q(sender_pool=inbound.sender_pool)
    since = inbound.received_at - timedelta(days=settings.INBOUND_REPLY_WINDOW_DAYS)
    return Message.objects.filter(
        ours,
        tenant_id__in=tenant_ids,
        to=contact,
        sent_at__isnull=False,
        sent_at__gte=since,
        sent_at__lte=inbound.received_at,
    )


def _replied(tenant_id: int, contact: str, inbound: InboundMessage) -> Replied | None:
    row = (
        _pair_messages([tenant_id], contact, inbound)
        .order_by("-id")
        .values("pk", "public_id", "status", "schedule_id", "campaign_id")
        .first()
    )
    if row is None:
        return None
    return Replied(
        id=row["pk"],
        public_id=row["public_id"],
        status=row["status"],
        schedule_id=row["schedule_id"],
        campaign_id=row["campaign_id"],
    )


def _process(inbound: InboundMessage, batch: Batch) -> None:
    """Work one message out. Reads, and the keyword's action in a savepoint of its own (the only writes
    here: an action that raises leaves nothing behind); the rest is written for the batch."""
    contact = _contact(inbound.from_number)
    inbound.from_number = contact
    inbound.conversation = f"{inbound.to_number}:{contact}"
    inbound.processed_at = batch.now
    route = _route(inbound, contact, batch)
    if route is None:
        inbound.state = InboundState.UNROUTED
        log.warning("inbound %s unrouted: no tenant owns the number it was sent to", inbound.public_id)
        return
    inbound.tenant_id = route.tenant_id
    replied = _replied(route.tenant_id, contact, inbound)
    inbound.in_reply_to = replied.public_id if replied else ""
    word = first_word(inbound.body)
    if word in BUILT_IN or (route.tenant_id, word) in batch.rule_keywords:
        numbers = (inbound.to_number, inbound.sender_pool)
        match = keyword_match(body=inbound.body, tenant_id=route.tenant_id, numbers=numbers)
    else:
        match = Match(keyword=word)
    inbound.keyword = match.keyword
    if match.near_miss:
        inbound.needs_review = True
        events.inbound_action("review")
    elif match.action and contact.startswith("+"):
        with transaction.atomic():
            inbound.action_result = actions.keyword_apply(inbound, match, replied)
            _shared_opt_out(inbound, match, route)
        inbound.action = match.action
        events.inbound_action(match.action)
    inbound.state = InboundState.ROUTED
    if replied is not None:
        details = {"inbound": inbound.public_id, "keyword": match.keyword, "action": inbound.action}
        batch.timeline.append((replied.id, "reply_received", replied.status, details))
    delivery = notify.received_delivery(
        inbound, webhook_url=route.webhook_url, replied_id=replied.id if replied else None, now=batch.now
    )
    if delivery is not None:
        batch.deliveries.append(delivery)
    if (route.tenant_id, inbound.to_number) in batch.forwards:
        batch.forward.append(inbound)


def _shared_opt_out(inbound: InboundMessage, match: Match, route: Route) -> None:
    """An opt-out (or opt-in) to a number an operator shares between tenants is the recipient's word to
    that number, whoever sent from it: every owner's list changes, not only the tenant the reply was
    routed to."""
    if match.action not in (KeywordAction.OPT_OUT, KeywordAction.OPT_IN):
        return
    change = (
        suppression.suppression_add
        if match.action == KeywordAction.OPT_OUT
        else suppression.suppression_remove
    )
    for tenant_id in route.owners:
        if tenant_id != route.tenant_id:
            change(
                tenant_id=tenant_id,
                number=inbound.from_number,
                sender=inbound.sender_pool or inbound.to_number,
                source=SuppressionSource.INBOUND_KEYWORD,
                actor="recipient",
                keyword=match.keyword[:16],  # SuppressionChange.keyword's length
            )
