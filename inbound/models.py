"""What a tenant's recipients send back (docs/inbound.md).

- ``InboundMessage``: one message a recipient sent to one of our numbers, stored before the provider's
  webhook is answered (inbound.intake), once: the provider's id is unique per provider, so a retried
  webhook finds its row and is dropped. Processed off the request path (inbound.process): its tenant
  (the owner of the receiving number), the message it answers (``in_reply_to``), its keyword and the
  action the keyword took, then the tenant's ``message.received`` webhook. A message to a number no
  tenant owns is kept as ``unrouted`` for operators, never dropped.
- ``InboundPart``: one part of a long message that the provider posts part by part (Vonage), kept until
  every part is there (or the wait is over) and the parts become one ``InboundMessage`` in part order.
- ``KeywordRule``: a tenant's own keyword (per receiving number, or for all of them) and what it does.
"""

from __future__ import annotations

import secrets

from django.db import models
from django.db.models import Q


def new_inbound_id() -> str:
    return "in_" + secrets.token_hex(12)


class InboundState(models.TextChoices):
    PENDING = "pending"  # stored; its tenant, keyword and webhook not yet worked out
    ROUTED = "routed"  # processed: its tenant's
    UNROUTED = "unrouted"  # processed: no tenant owns the number it was sent to (kept for operators)


class KeywordAction(models.TextChoices):
    OPT_OUT = "opt_out"  # the sender goes on the tenant's suppression list for this number
    OPT_IN = "opt_in"  # and comes off it
    HELP = "help"  # recorded, and answered with the tenant's help text
    CANCEL = (
        "cancel"  # the pending messages of the replied-to message's schedule or campaign, for this contact
    )
    CONFIRM = "confirm"  # a confirmation on the replied-to message (timeline and webhook)


class InboundMessage(models.Model):
    public_id = models.CharField(max_length=32, unique=True, default=new_inbound_id, editable=False)
    provider = models.CharField(max_length=32)
    provider_message_id = models.CharField(max_length=64)
    # Null until processed, and for good when no tenant owns the number (state "unrouted").
    tenant = models.ForeignKey(
        "smsgw.Tenant",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="inbound_messages",
        db_index=False,  # inbound_tenant_recent and inbound_tenant_contact serve it
    )
    from_number = models.CharField(max_length=32)  # who wrote: the contact (E.164 when it is a number)
    to_number = models.CharField(max_length=32)  # our number it was sent to
    sender_pool = models.CharField(
        max_length=64, blank=True
    )  # the pool that number is in, if the provider says
    body = models.TextField(blank=True)
    segments = models.PositiveSmallIntegerField(default=1)
    state = models.CharField(max_length=12, choices=InboundState.choices, default=InboundState.PENDING)
    keyword = models.CharField(max_length=32, blank=True)  # its first word, upper-cased
    # The last message the tenant sent on the same number pair before this arrived (its public id).
    in_reply_to = models.CharField(max_length=32, blank=True)
    # The number pair ("<our number or pool>:<contact>"): what a conversation is.
    conversation = models.CharField(max_length=100, blank=True)
    # The keyword's action, its outcome (what it changed, the reply sent), and a near miss ("stop
    # please") left for the tenant to review instead of applied.
    action = models.CharField(max_length=12, blank=True, choices=KeywordAction.choices)
    action_result = models.JSONField(default=dict, blank=True)
    needs_review = models.BooleanField(default=False)
    payload = models.JSONField(
        default=dict, blank=True
    )  # the provider's other fields: no body, numbers masked
    # For a long message joined from its parts: how many there were and which never came.
    parts = models.PositiveSmallIntegerField(default=0)
    parts_missing = models.JSONField(default=list, blank=True)
    provider_sent_at = models.DateTimeField(null=True, blank=True)  # the provider's time, when it says
    received_at = models.DateTimeField()  # when its webhook reached us
    processed_at = models.DateTimeField(null=True, blank=True)
    tries = models.PositiveSmallIntegerField(default=0)
    next_try_at = models.DateTimeField()

    class Meta:
        constraints = [
            # The provider's id once: the same webhook retried (or spooled and retried) is one row.
            models.UniqueConstraint(
                fields=["provider", "provider_message_id"], name="inbound_provider_id_unique"
            )
        ]
        indexes = [
            models.Index(fields=["next_try_at"], name="inbound_pending", condition=Q(state="pending")),
            models.Index(fields=["tenant", "-id"], name="inbound_tenant_recent"),
            models.Index(fields=["tenant", "from_number", "-id"], name="inbound_tenant_contact"),
            models.Index(fields=["-id"], name="inbound_unrouted", condition=Q(state="unrouted")),
            # The retention job (retention.inbound): the record horizon walks the processed rows oldest
            # first; the content horizon only the ones that still hold content (a removed one has its
            # contact masked), so a run costs what is due, not what was done before.
            models.Index(fields=["received_at"], name="inbound_processed", condition=~Q(state="pending")),
            models.Index(
                fields=["received_at"],
                name="inbound_content_held",
                condition=~Q(state="pending") & ~Q(from_number__contains="*"),
            ),
            # /metrics (reporting.state): near misses left for the tenant's review, recent ones counted.
            models.Index(fields=["received_at"], name="inbound_review", condition=Q(needs_review=True)),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} {self.state}"


class UnroutedInbound(InboundMessage):
    """The inbound messages no tenant owns the number of (state ``unrouted``): their own page in the
    operator console (inbound.admin), so they are found without knowing the filter."""

    class Meta:
        proxy = True
        verbose_name = "unrouted inbound message"


class InboundPart(models.Model):
    provider = models.CharField(max_length=32)
    provider_message_id = models.CharField(max_length=64)  # each part has its own
    from_number = models.CharField(max_length=32)
    to_number = models.CharField(max_length=32)
    sender_pool = models.CharField(max_length=64, blank=True)
    concat_ref = models.CharField(max_length=16)
    total = models.PositiveSmallIntegerField()
    part = models.PositiveSmallIntegerField()
    body = models.TextField(blank=True)
    payload = models.JSONField(default=dict, blank=True)
    provider_sent_at = models.DateTimeField(null=True, blank=True)
    received_at = models.DateTimeField()
    # The message its parts became (inbound.parts); null while the others are awaited.
    message = models.ForeignKey(
        InboundMessage, null=True, blank=True, on_delete=models.CASCADE, related_name="message_parts"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["provider", "provider_message_id"], name="inbound_part_id_unique")
        ]
        indexes = [
            models.Index(
                fields=["provider", "from_number", "to_number", "concat_ref"],
                name="inbound_part_waiting",
                condition=Q(message__isnull=True),
            )
        ]

    def __str__(self) -> str:
        return f"part {self.part}/{self.total} of {self.concat_ref}"


class KeywordRule(models.Model):
    """A tenant's keyword: the whole message, one word, matched trimmed and case-insensitive. It wins over
    the built-in lists (inbound.keywords: STOP/ARRET/ALTO..., START..., HELP/INFO/AIDE...)."""

    tenant = models.ForeignKey("smsgw.Tenant", on_delete=models.CASCADE, related_name="keyword_rules")
    # One of the tenant's receiving numbers (or pools); empty: every one of them.
    number = models.CharField(max_length=64, blank=True)
    keyword = models.CharField(max_length=32)  # upper case, one word
    action = models.CharField(max_length=12, choices=KeywordAction.choices)
    reply = models.CharField(max_length=640, blank=True, help_text="Sent back to the contact; empty: none.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "number", "keyword"], name="keyword_rule_unique")
        ]

    def __str__(self) -> str:
        return f"{self.keyword} -> {self.action}"
