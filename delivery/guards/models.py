"""Records of the SMS-pumping velocity guard (delivery.guards.velocity): review holds an operator releases or
cancels, the per-window counters and the per-tenant set of numbers already sent to. Imported by
delivery.models, so they belong to the delivery app."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class ReviewRule(models.TextChoices):
    PREFIX = "prefix", "messages to one destination prefix"
    NEW_NUMBERS = "new_numbers", "messages to numbers never sent to before"


class ReviewState(models.TextChoices):
    OPEN = "open"
    RELEASED = "released"
    CANCELLED = "cancelled"


class ReviewHold(models.Model):
    """A velocity rule tripped for a tenant: the messages over the limit wait in ``scheduled`` (reason
    ``held_for_review``) until an operator releases them (they go out, and the rule does not hold this
    key again in this window) or cancels them. At most one open hold per (tenant, rule, prefix)."""

    tenant = models.ForeignKey("smsgw.Tenant", on_delete=models.PROTECT, related_name="+")
    rule = models.CharField(max_length=16, choices=ReviewRule.choices)
    prefix = models.CharField(max_length=16, blank=True, help_text="digits after +; empty for new_numbers")
    limit = models.PositiveIntegerField(help_text="messages allowed per window when the hold opened")
    window_seconds = models.PositiveIntegerField()
    window_start = models.BigIntegerField(help_text="epoch seconds: the counting window that tripped")
    state = models.CharField(max_length=10, choices=ReviewState.choices, default=ReviewState.OPEN)
    held_count = models.PositiveIntegerField(default=0)
    opened_at = models.DateTimeField()
    last_held_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)
    closed_by = models.CharField(max_length=200, blank=True)
    closed_count = models.PositiveIntegerField(default=0, help_text="messages released or cancelled")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "rule", "prefix"], condition=Q(state="open"), name="reviewhold_one_open"
            ),
        ]
        indexes = [models.Index(fields=["tenant", "rule", "prefix", "window_start"], name="reviewhold_key")]

    def __str__(self) -> str:
        what = f"+{self.prefix}…" if self.prefix else "new numbers"
        return f"review hold {self.pk}: tenant {self.tenant_id} {what} ({self.state})"

    def describe(self) -> str:
        window = (
            f"{self.window_seconds // 60} min" if self.window_seconds >= 60 else f"{self.window_seconds} s"
        )
        if self.rule == ReviewRule.PREFIX:
            return f"held for review: more than {self.limit} messages to +{self.prefix}… within {window}"
        return f"held for review: more than {self.limit} messages to new numbers within {window}"


class ReviewHoldMessage(models.Model):
    """Which messages a hold covers (written only when a message is held, the rare path), so release and
    cancel find exactly them."""

    hold = models.ForeignKey(ReviewHold, on_delete=models.CASCADE, related_name="messages")
    message = models.ForeignKey("scheduling.Message", on_delete=models.CASCADE, related_name="+")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["hold", "message"], name="reviewholdmessage_unique")]

    def __str__(self) -> str:
        return f"hold {self.hold_id} message {self.message_id}"


class VelocityCounter(models.Model):
    """Messages released per (tenant, rule, key) in one fixed window: one upsert per distinct key per
    release pass, not a count(*) per message. Old windows are pruned by the release tick."""

    tenant = models.ForeignKey("smsgw.Tenant", on_delete=models.CASCADE, related_name="+", db_index=False)
    rule = models.CharField(max_length=16, choices=ReviewRule.choices)
    key = models.CharField(max_length=16, blank=True)
    window_start = models.BigIntegerField()
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "rule", "key", "window_start"], name="velocitycounter_unique"
            ),
        ]
        indexes = [models.Index(fields=["window_start"], name="velocitycounter_window")]

    def __str__(self) -> str:
        return f"{self.rule} {self.key} @ {self.window_start}: {self.count}"


class KnownNumber(models.Model):
    """A number this tenant has released a message to, as a keyed 64-bit digest (not the number: no
    second copy of recipients' numbers; delivery.guards.velocity.number_digest). One index probe per tenant
    per
    release pass tells the new numbers from the known ones."""

    tenant = models.ForeignKey("smsgw.Tenant", on_delete=models.CASCADE, related_name="+", db_index=False)
    digest = models.BigIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "digest"], name="knownnumber_unique")]

    def __str__(self) -> str:
        return f"known number of tenant {self.tenant_id}"
