"""Messages (one logical message = one execution) and their append-only timeline.

``run_after`` is the one column the sweep watches. Its meaning depends on the status:
  scheduled -> when the message becomes due (= due_at, or the retry time after a transient error)
  queued    -> when a still-queued message is presumed lost by the broker and re-published
  sending   -> when the send lease expires and the attempt must be reconciled
Terminal statuses clear it. One partial index per active status keeps each sweep query proportional to
what is due, not to how much is pending.
"""

from __future__ import annotations

import secrets

from django.db import models
from django.db.models import Q

from smsgw.models import Tenant


class Status(models.TextChoices):
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    SENDING = "sending"
    SENT = "sent"
    DELIVERED = "delivered"
    UNDELIVERED = "undelivered"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


TERMINAL_STATUSES = frozenset(
    {Status.DELIVERED, Status.UNDELIVERED, Status.FAILED, Status.CANCELLED, Status.EXPIRED}
)


class Priority(models.TextChoices):
    TRANSACTIONAL = "transactional"
    BULK = "bulk"


def new_public_id() -> str:
    return "msg_" + secrets.token_hex(12)


class Message(models.Model):
    public_id = models.CharField(max_length=32, unique=True, default=new_public_id, editable=False)
    # No separate index on tenant_id: msg_tenant_recent (tenant, -id) serves every tenant lookup, and each
    # index costs an entry per status change (status updates cannot be HOT; status is in index predicates).
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="messages", db_index=False)

    to = models.CharField(max_length=20)
    from_number = models.CharField(max_length=32, blank=True)
    messaging_service_sid = models.CharField(max_length=64, blank=True)
    body = models.TextField()
    encoding = models.CharField(max_length=8)
    segments = models.PositiveSmallIntegerField()
    priority = models.CharField(max_length=16, choices=Priority.choices, default=Priority.TRANSACTIONAL)
    metadata = models.JSONField(default=dict, blank=True)

    # The intent, stored as given, beside the instant derived from it.
    requested_send_at = models.CharField(max_length=64, blank=True)  # raw string from the request
    requested_local_time = models.DateTimeField(null=True, blank=True)  # naive wall time (stored as UTC-less)
    requested_timezone = models.CharField(max_length=64, blank=True)
    dst_policy = models.CharField(max_length=8, default="earlier")
    dst_adjustment = models.CharField(max_length=32, default="none")
    due_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    status = models.CharField(max_length=16, choices=Status.choices, default=Status.SCHEDULED)
    status_reason = models.CharField(max_length=255, blank=True)
    version = models.PositiveIntegerField(default=1)
    run_after = models.DateTimeField(null=True, blank=True)
    attempt_count = models.PositiveSmallIntegerField(default=0)

    provider = models.CharField(max_length=32, blank=True)
    provider_message_id = models.CharField(max_length=64, null=True, blank=True)
    provider_status = models.CharField(max_length=32, blank=True)
    error_code = models.CharField(max_length=32, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    sending_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)

    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    request_fingerprint = models.CharField(max_length=64, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="msg_idempotency_key_per_tenant",
            ),
            models.UniqueConstraint(
                fields=["provider", "provider_message_id"],
                condition=Q(provider_message_id__isnull=False),
                name="msg_provider_message_id_unique",
            ),
        ]
        indexes = [
            # Sweep: due scheduled work, per priority class, oldest first.
            models.Index(
                fields=["priority", "run_after"], name="msg_scheduled_due", condition=Q(status="scheduled")
            ),
            # Recovery: queued rows whose broker message may be lost, sending rows whose lease expired.
            models.Index(fields=["run_after"], name="msg_queued_recovery", condition=Q(status="queued")),
            models.Index(fields=["run_after"], name="msg_sending_lease", condition=Q(status="sending")),
            models.Index(fields=["tenant", "-id"], name="msg_tenant_recent"),
            models.Index(fields=["tenant", "to", "-id"], name="msg_tenant_recipient"),
        ]

    def __str__(self) -> str:
        return self.public_id


class MessageEvent(models.Model):
    """Append-only timeline entry. Written only by ``scheduling.transitions`` and the services."""

    # Indexed through msgevent_timeline (message, id); a second FK index would only cost writes.
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="events", db_index=False)
    kind = models.CharField(max_length=32)
    from_status = models.CharField(max_length=16, blank=True)
    to_status = models.CharField(max_length=16, blank=True)
    actor = models.CharField(max_length=64, default="system")
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["message", "id"], name="msgevent_timeline")]

    def __str__(self) -> str:
        return f"{self.kind} {self.from_status}->{self.to_status}"
