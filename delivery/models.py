"""One Attempt row per provider call, committed before the call is made (SPEC §5.3)."""

from __future__ import annotations

from django.db import models

from scheduling.models import Message


class AttemptOutcome(models.TextChoices):
    PENDING = "pending"  # committed, provider call in progress
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    TRANSIENT_ERROR = "transient_error"
    UNCERTAIN = "uncertain"  # may have reached the provider; must be reconciled, never blindly resent
    RECONCILED_FOUND = "reconciled_found"  # an uncertain attempt the provider turned out to have
    RECONCILED_ABSENT = "reconciled_absent"  # an uncertain attempt the provider never received


class Attempt(models.Model):
    # Indexed through the (message, number) unique constraint.
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="attempts", db_index=False)
    number = models.PositiveSmallIntegerField()
    provider = models.CharField(max_length=32)
    route = models.CharField(max_length=64, blank=True)
    idempotency_token = models.CharField(max_length=64)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, choices=AttemptOutcome.choices, default=AttemptOutcome.PENDING)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    provider_code = models.CharField(max_length=32, blank=True)
    provider_message_id = models.CharField(max_length=64, blank=True)
    latency_ms = models.FloatField(null=True, blank=True)
    response = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["message", "number"], name="attempt_number_per_message"),
        ]
        indexes = [
            models.Index(
                fields=["outcome"], name="attempt_uncertain", condition=models.Q(outcome="uncertain")
            ),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.message_id}: {self.outcome}"
