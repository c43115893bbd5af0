"""Delivery's records: one Attempt row per provider call, committed before the call is made (SPEC §5.3);
holds on a provider account, sender or destination after an account fault; duplicate submissions found
after the fact; and opt-outs the provider reported."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from scheduling.models import Message


class AttemptOutcome(models.TextChoices):
    PENDING = "pending"  # committed, provider call in progress
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    TRANSIENT_ERROR = "transient_error"
    THROTTLED = "throttled"  # the provider was over capacity; resent later, not counted as an attempt
    ACCOUNT_FAULT = "account_fault"  # our account/sender was refused; the scope is held, not the message
    UNCERTAIN = "uncertain"  # may have reached the provider; must be reconciled, never blindly resent
    RECONCILED_FOUND = "reconciled_found"  # an uncertain attempt the provider turned out to have
    RECONCILED_ABSENT = "reconciled_absent"  # an uncertain attempt the provider never received


class Attempt(models.Model):
    # Indexed through the (message, number) unique constraint.
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="attempts", db_index=False)
    number = models.PositiveSmallIntegerField()  # provider calls of this message, 1, 2, ...
    provider = models.CharField(max_length=32)
    route = models.CharField(max_length=64, blank=True)
    idempotency_token = models.CharField(max_length=64)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, choices=AttemptOutcome.choices, default=AttemptOutcome.PENDING)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    provider_code = models.CharField(max_length=32, blank=True)
    error_class = models.CharField(max_length=16, blank=True)  # delivery.providers.base.ErrorClass
    provider_message_id = models.CharField(max_length=64, blank=True)
    latency_ms = models.FloatField(null=True, blank=True)
    response = models.JSONField(default=dict, blank=True)
    # The ValidityPeriod sent with the request: the provider drops the message after this long.
    validity_seconds = models.PositiveIntegerField(null=True, blank=True)
    # Reconciliation: when a look-up first found nothing. Absence is declared only by a second look a
    # grace window later (delivery.reconcile).
    lookup_absent_at = models.DateTimeField(null=True, blank=True)

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


class ProviderHold(models.Model):
    """Sending stopped for a scope of a provider account after an account fault (credentials refused,
    account suspended, an unregistered sender, a destination the account may not reach). Messages in
    the scope wait in `queued`, unharmed and cancellable, until a probe succeeds or an operator clears
    the hold. One open hold per scope (cleared_at is null)."""

    provider = models.CharField(max_length=32)
    account = models.CharField(max_length=64)
    scope = models.CharField(max_length=16)  # delivery.providers.base.HoldScope
    scope_value = models.CharField(max_length=64, blank=True)  # sender, or destination prefix ("+98")
    error_code = models.CharField(max_length=32, blank=True)
    reason = models.CharField(max_length=255)
    opened_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    next_probe_at = models.DateTimeField()
    probe_interval_seconds = models.PositiveIntegerField()
    probes = models.PositiveIntegerField(default=0)
    last_probe_detail = models.CharField(max_length=255, blank=True)
    cleared_at = models.DateTimeField(null=True, blank=True)
    cleared_by = models.CharField(max_length=64, blank=True)
    cleared_reason = models.CharField(max_length=255, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "account", "scope", "scope_value"],
                condition=Q(cleared_at__isnull=True),
                name="providerhold_one_open_per_scope",
            ),
        ]
        indexes = [
            models.Index(
                fields=["provider", "account"], name="providerhold_open", condition=Q(cleared_at__isnull=True)
            )
        ]

    def __str__(self) -> str:
        what = f"{self.scope} {self.scope_value}".strip()
        return f"{self.provider}/{self.account}: {what} held ({self.error_code or 'no code'})"

    @property
    def is_open(self) -> bool:
        return self.cleared_at is None


class DuplicateSubmission(models.Model):
    """Evidence that the provider holds a second submission of one message: a status callback for a sid
    we never recorded, naming (through its signed callback URL) a message that already has another sid.
    Each is an incident an operator should see: the recipient may have received the SMS twice."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="duplicate_submissions")
    provider = models.CharField(max_length=32)
    provider_message_id = models.CharField(max_length=64)
    attempt_number = models.PositiveSmallIntegerField(null=True, blank=True)
    detected_at = models.DateTimeField()
    detected_by = models.CharField(max_length=32)  # "receipt"
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["provider", "provider_message_id"], name="duplicate_sid_unique"),
        ]

    def __str__(self) -> str:
        return f"duplicate {self.provider_message_id} of message {self.message_id}"


class OptOutSignal(models.Model):
    """A provider said the recipient unsubscribed (Twilio 21610, at submission or in a callback). Kept
    per tenant, number and sender, to feed the tenant's suppression list."""

    tenant_id = models.BigIntegerField()
    to = models.CharField(max_length=20)
    from_number = models.CharField(max_length=32, blank=True)
    messaging_service_sid = models.CharField(max_length=64, blank=True)
    provider = models.CharField(max_length=32)
    error_code = models.CharField(max_length=32, blank=True)
    message = models.ForeignKey(
        Message, null=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["tenant_id", "to"], name="optout_tenant_to")]

    def __str__(self) -> str:
        return f"opt-out tenant {self.tenant_id}"
