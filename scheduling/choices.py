"""A message's status and priority class: the choices every stage reads (scheduling.models re-exports
them)."""

from __future__ import annotations

from django.db import models


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
