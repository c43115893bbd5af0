"""What retention keeps about a message's whole life (docs/retention.md).

- ``TenantRetention``: a tenant's own horizons. Without a row, or with a null, the gateway's defaults
  apply (settings ``RETENTION_CONTENT_DAYS`` / ``RETENTION_RECORD_DAYS``).
- ``MessageHistory``: a finished message moved out of the operational tables (retention.history), its
  row, timeline, attempts, receipt evidence and webhook deliveries as one document. On PostgreSQL the
  table is partitioned by ``purge_on`` (one partition a day), so the record horizon drops a partition
  instead of deleting rows; on SQLite (embedded mode) it is a plain table pruned with a DELETE.
- ``Export``: one tenant's finished messages of one day, gzip JSON lines in the export storage.
- ``RetentionAudit``: who removed content or records, when, and how many rows of each table: never what
  was removed (no body, no number, not even a hash of one: a phone number's hash is reversible by
  trying every number).
"""

from __future__ import annotations

import secrets

from django.db import models
from django.db.models import Q


class TenantRetention(models.Model):
    tenant = models.OneToOneField(
        "smsgw.Tenant", on_delete=models.CASCADE, primary_key=True, related_name="retention"
    )
    # Days after a message is final before its content goes (body, full number, metadata, webhook
    # payloads); null: the gateway's default.
    content_days = models.PositiveIntegerField(null=True, blank=True)
    # Days after a message is final before its record goes (the history row itself); null: the default.
    record_days = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=200, blank=True)

    class Meta:
        verbose_name = "tenant retention"

    def __str__(self) -> str:
        return f"retention of tenant {self.tenant_id}"


class MessageHistory(models.Model):
    """A finished message's whole record, moved out of the tables the sweep, the claim, the send worker
    and the receipt processor share. ``id`` is the message's own id, so lists keep one order across the
    live table and this one. The database's primary key is (id, purge_on) on PostgreSQL (a partitioned
    table's keys must hold its partition key); Django addresses rows by ``id``, which stays unique
    because a message moves once."""

    id = models.BigIntegerField(primary_key=True)
    public_id = models.CharField(max_length=32)
    tenant_id = models.BigIntegerField()
    to = models.CharField(max_length=20)  # the full number until the content horizon, then masked
    from_number = models.CharField(max_length=32, blank=True, default="")
    status = models.CharField(max_length=16)
    reason_code = models.CharField(max_length=32, blank=True, default="")
    provider = models.CharField(max_length=32, blank=True)
    provider_message_id = models.CharField(max_length=64, null=True, blank=True)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    campaign_id = models.BigIntegerField(null=True, blank=True)
    schedule_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField()
    due_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField()
    # Deleted by the tenant (the Twilio-compatible DELETE) before it moved: kept for the audit trail,
    # never shown to the tenant's API.
    deleted = models.BooleanField(default=False)
    moved_at = models.DateTimeField()
    # The day the record goes (finished + the tenant's record horizon, taken when it moved): the partition
    # key, so pruning a day is one DROP of one partition whatever the tenants' horizons.
    purge_on = models.DateField()
    # The day its content goes; null once it has gone.
    redact_on = models.DateField(null=True, blank=True)
    # {"message": {column: value}, "events": [...], "attempts": [...], "receipts": [...],
    #  "webhooks": [...]} (retention.history.document).
    document = models.JSONField()

    class Meta:
        verbose_name_plural = "message history"
        indexes = [
            models.Index(fields=["tenant_id", "-id"], name="hist_tenant_recent"),
            models.Index(fields=["public_id"], name="hist_public_id"),
            # A tenant's finished messages of one day (retention.exports, a day read back from history).
            models.Index(fields=["tenant_id", "finished_at"], name="hist_tenant_finished"),
            models.Index(fields=["tenant_id", "to", "-id"], name="hist_tenant_recipient"),
            models.Index(
                fields=["tenant_id", "idempotency_key"],
                name="hist_idempotency",
                condition=Q(idempotency_key__isnull=False),
            ),
            models.Index(
                fields=["provider_message_id"],
                name="hist_provider_sid",
                condition=Q(provider_message_id__isnull=False),
            ),
            models.Index(
                fields=["campaign_id", "-id"], name="hist_campaign", condition=Q(campaign_id__isnull=False)
            ),
            models.Index(fields=["redact_on"], name="hist_redact_due", condition=Q(redact_on__isnull=False)),
        ]

    def __str__(self) -> str:
        return self.public_id


def new_export_id() -> str:
    return "exp_" + secrets.token_hex(12)


class Export(models.Model):
    """One tenant's finished messages of one UTC day, written once as gzip JSON lines through the export
    storage (settings ``STORAGES["exports"]``), listed and downloaded through ``GET /v1/exports``, and
    removed with its file at ``expires_at``."""

    public_id = models.CharField(max_length=32, unique=True, default=new_export_id, editable=False)
    tenant = models.ForeignKey(
        "smsgw.Tenant", on_delete=models.CASCADE, related_name="exports", db_index=False
    )
    day = models.DateField()
    name = models.CharField(max_length=255)  # the file's name in the export storage
    rows = models.PositiveIntegerField(default=0)
    size = models.BigIntegerField(default=0)
    sha256 = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "day"], name="export_one_per_tenant_day")]
        indexes = [
            models.Index(fields=["tenant", "-day"], name="export_tenant_recent"),
            models.Index(fields=["expires_at"], name="export_expiry"),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} {self.day}"


class RetentionAction(models.TextChoices):
    REDACT = "redact"  # one message's content, on request (API, Twilio-compatible Body="")
    ERASE = "erase"  # every trace of one number in one tenant's data, on request
    CONTENT_HORIZON = "content_horizon"  # the retention job: content past its horizon
    RECORD_HORIZON = "record_horizon"  # the retention job: records past their horizon
    HISTORY_MOVE = "history_move"  # the retention job: finished messages moved to history
    EXPORT_PRUNE = "export_prune"  # exports past their keep time


class RetentionAudit(models.Model):
    tenant = models.ForeignKey(
        "smsgw.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="+", db_index=False
    )  # null: a gateway-wide pass
    action = models.CharField(max_length=24, choices=RetentionAction.choices)
    actor = models.CharField(max_length=200)
    # A message's public id for a redaction; empty for an erasure (which must not say whose number).
    subject = models.CharField(max_length=64, blank=True)
    counts = models.JSONField(default=dict, blank=True)  # rows changed or removed, per table
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["tenant", "-id"], name="retaudit_tenant_recent")]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor}"
