"""Provider callbacks as received (ReceiptEvent) and status notifications owed to tenants
(WebhookDelivery, an outbox written in the same transaction as the status change it reports)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from scheduling.models import Message
from smsgw.models import Tenant


class ReceiptOutcome(models.TextChoices):
    PENDING = "pending"  # not processed yet, or waiting for its provider id to be known
    APPLIED = "applied"  # moved the message forward
    RECORDED = "recorded"  # kept on the timeline; the message was already at or past this status
    UNKNOWN_STATUS = "unknown_status"  # a status we do not know: kept raw for review, nothing changed
    ORPHANED = "orphaned"  # no message ever had this provider id within the wait window
    # A sid the message never recorded, named by the signed callback URL: a second submission of it.
    DUPLICATE = "duplicate_submission"
    SUPERSEDED = "superseded"  # the sid of an earlier attempt of the message (failed at the provider)


class ReceiptEvent(models.Model):
    provider = models.CharField(max_length=32)
    provider_message_id = models.CharField(max_length=64)
    raw_status = models.CharField(max_length=32)
    normalized_status = models.CharField(max_length=16, blank=True)
    error_code = models.CharField(max_length=32, blank=True)
    payload = models.JSONField(default=dict)  # redacted: numbers masked, no body
    # provider + id + status: a repeated callback for the same status is the same receipt.
    dedupe_key = models.CharField(max_length=64, unique=True)
    received_at = models.DateTimeField()
    next_try_at = models.DateTimeField()
    tries = models.PositiveSmallIntegerField(default=0)
    processed_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=24, choices=ReceiptOutcome.choices, default=ReceiptOutcome.PENDING)
    message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="receipts", db_index=False
    )
    # The carrier's delivery-receipt time, when the provider passes it (Twilio's RawDlrDoneDate).
    done_at = models.DateTimeField(null=True, blank=True)
    # Our message and attempt, from the callback URL we gave with the submission (signed by the provider
    # with the rest of the URL): they name the message even for a sid it never recorded.
    message_hint = models.CharField(max_length=32, blank=True, default="", db_default="")
    attempt_hint = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["next_try_at"], name="receipt_unprocessed", condition=Q(processed_at__isnull=True)
            ),
            models.Index(fields=["provider", "provider_message_id"], name="receipt_by_provider_id"),
            models.Index(fields=["message", "id"], name="receipt_by_message"),
        ]

    def __str__(self) -> str:
        return f"{self.provider_message_id} {self.raw_status}"


class WebhookStatus(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    DEAD = "dead"  # retries exhausted: dead-lettered, replayable


class WebhookDelivery(models.Model):
    # Sent as `webhook-id`; the same on every retry and replay so receivers can de-duplicate.
    webhook_id = models.CharField(max_length=40, unique=True)
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="webhook_deliveries", db_index=False
    )
    message = models.ForeignKey(
        Message,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_index=False,
        related_name="webhook_deliveries",
    )
    event_type = models.CharField(max_length=40)
    payload = models.JSONField()
    status = models.CharField(max_length=12, choices=WebhookStatus.choices, default=WebhookStatus.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=255, blank=True)
    history = models.JSONField(default=list, blank=True)  # one entry per attempt: at, code, error, ms
    # The first attempt of the current retry window (receipts.webhook_retry): set by the first failure,
    # cleared by a replay so that a replayed delivery gets a whole window again.
    retrying_since = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "webhook deliveries"
        indexes = [
            models.Index(fields=["next_attempt_at"], name="webhook_due", condition=Q(status="pending")),
            models.Index(fields=["tenant", "-id"], name="webhook_tenant_recent"),
            models.Index(fields=["message", "id"], name="webhook_by_message"),
        ]

    def __str__(self) -> str:
        return f"{self.webhook_id} {self.status}"


class StatusLookup(models.Model):
    """A `sent` message whose final receipt never came, looked up at the provider (receipts.lookup): how
    often, when next, and whether we stopped."""

    message = models.OneToOneField(Message, on_delete=models.CASCADE, related_name="status_lookup")
    tries = models.PositiveSmallIntegerField(default=0)
    next_at = models.DateTimeField()
    last_status = models.CharField(max_length=32, blank=True)
    gave_up_at = models.DateTimeField(null=True, blank=True)  # bounded: not looked up again after this

    def __str__(self) -> str:
        return f"{self.message_id} {self.tries} {self.last_status}"


class SignedCallbackSeen(models.Model):
    """A one-time signed provider callback already taken (receipts.replay): kept until ``expires_at``,
    past the provider's timestamp window, so the same signed request is refused when posted again."""

    # sha256 of "<provider>:<signature>": fixed length whatever the provider's signature method.
    key = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["expires_at"], name="signed_callback_expiry")]

    def __str__(self) -> str:
        return f"{self.key[:12]} until {self.expires_at:%Y-%m-%d %H:%M:%S}"
