"""A campaign and what its creation job keeps: the uploaded list's chunks, the line ranges its jobs make,
the rows it could not make and its progress counters. Models of the ``scheduling`` app (its migrations),
kept beside the campaigns' code; ``scheduling.models`` re-exports them."""

from __future__ import annotations

import secrets

from django.db import models
from django.db.models import Q

from scheduling.choices import Priority
from smsgw.models import Tenant


class CampaignStatus(models.TextChoices):
    CREATING = "creating"  # recipients are being read and their messages made (in bounded batches)
    ACTIVE = "active"  # every recipient read; messages go out as they become due
    PAUSED = "paused"  # nothing more is handed to the provider until resumed
    CANCELLED = "cancelled"  # pending messages cancelled; nothing more is made
    COMPLETED = "completed"  # every message reached a final status
    FAILED = "failed"  # the recipient list could not be read at all (see status_reason)


class CampaignTimeMode(models.TextChoices):
    NOW = "now"
    INSTANT = "instant"  # one absolute time (send_at with an offset)
    LOCAL = "local"  # one local wall time in the campaign's timezone
    RECIPIENT_LOCAL = "recipient_local"  # that wall time in each recipient's own timezone


def new_campaign_id() -> str:
    return "cmp_" + secrets.token_hex(12)


class Campaign(models.Model):
    """A bulk send (docs/campaigns.md): many recipients sharing a time and a body or template. Every recipient
    becomes an ordinary Message linked here, made in bounded batches by the one message-birth path.
    Progress is read from CampaignCounter (sharded counters kept by the transitions), never from a
    count over the message table."""

    public_id = models.CharField(max_length=32, unique=True, default=new_campaign_id, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="campaigns", db_index=False)
    name = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=CampaignStatus.choices, default=CampaignStatus.CREATING)
    status_reason = models.CharField(max_length=255, blank=True)
    version = models.PositiveIntegerField(default=1)

    body = models.TextField()  # the body, or the template with {variable} placeholders
    is_template = models.BooleanField(default=False)
    variables = models.JSONField(default=list, blank=True)  # placeholder names found in the template
    from_number = models.CharField(max_length=32, blank=True)
    # The column keeps its old name until the release after this one (docs/deploy.md, "Rolling out a
    # release": nothing renamed that the previous release still reads).
    sender_pool = models.CharField(max_length=64, blank=True, db_column="messaging_service_sid")
    priority = models.CharField(max_length=16, choices=Priority.choices, default=Priority.BULK)
    validity_seconds = models.PositiveIntegerField()
    metadata = models.JSONField(default=dict, blank=True)

    time_mode = models.CharField(
        max_length=16, choices=CampaignTimeMode.choices, default=CampaignTimeMode.NOW
    )
    requested_send_at = models.CharField(max_length=64, blank=True)  # raw string from the request
    timezone = models.CharField(max_length=64, blank=True)  # LOCAL: the zone; RECIPIENT_LOCAL: the default
    dst_policy = models.CharField(max_length=8, default="earlier")
    quiet_hours = models.JSONField(default=dict, blank=True)  # {} = tenant policy (scheduling.dispatch.quiet)
    allow_duplicates = models.BooleanField(default=False)

    # Creation job: where reading the recipient list has got to, so a crashed job resumes there.
    source_format = models.CharField(max_length=8, default="json")  # json | csv
    source_bytes = models.BigIntegerField(default=0)
    lines_read = models.PositiveIntegerField(default=0)
    recipients_total = models.PositiveIntegerField(default=0)  # rows read (valid or not)
    messages_made = models.PositiveIntegerField(default=0)
    rows_rejected = models.PositiveIntegerField(default=0)  # invalid rows (CampaignError)
    duplicates_skipped = models.PositiveIntegerField(default=0)
    recipients_skipped = models.PositiveIntegerField(default=0)  # suppressed or refused destinations

    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    request_fingerprint = models.CharField(max_length=64, blank=True)
    created_by = models.CharField(max_length=64, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    made_at = models.DateTimeField(null=True, blank=True)  # the last recipient's message was made
    paused_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="cmp_idempotency_key_per_tenant",
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "-id"], name="cmp_tenant_recent"),
            # The creation job and the pause check look only at campaigns in these states.
            models.Index(fields=["status"], name="cmp_open", condition=Q(status__in=["creating", "paused"])),
        ]

    def __str__(self) -> str:
        return self.public_id


class CampaignUpload(models.Model):
    """The recipient list as received (CSV bytes or the JSON array re-encoded as CSV), stored in the
    database in fixed-size chunks so the creation job, on any worker host, streams it back without
    holding the file in memory. Deleted when the campaign's messages are all made."""

    campaign = models.ForeignKey(
        Campaign, on_delete=models.CASCADE, related_name="upload_chunks", db_index=False
    )
    seq = models.PositiveIntegerField()
    data = models.BinaryField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["campaign", "seq"], name="cmpupload_seq_unique")]

    def __str__(self) -> str:
        return f"{self.campaign_id}#{self.seq}"


class CampaignRange(models.Model):
    """One line range of a campaign's recipient list, made by its own creation job (one Celery task, so
    ranges run in as many worker processes as the ``campaigns`` queue has). ``first``/``end`` and
    ``position`` count data records (the header excluded) from the start of the list; ``position`` is the
    range's checkpoint, moved in the same transaction as each batch it made, so a job killed mid-range
    resumes exactly where its last batch committed. ``end`` null: to the end of the list."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="ranges", db_index=False)
    index = models.PositiveSmallIntegerField()
    first = models.PositiveIntegerField()
    end = models.PositiveIntegerField(null=True, blank=True)
    position = models.PositiveIntegerField()
    done = models.BooleanField(default=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["campaign", "index"], name="cmprange_index_unique")]

    def __str__(self) -> str:
        return f"{self.campaign_id}[{self.index}] {self.first}-{self.end or ''} at {self.position}"


class CampaignError(models.Model):
    """A recipient row that was not made into a message: its line, the raw value and why."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="errors", db_index=False)
    line = models.PositiveIntegerField()  # 1-based line in the CSV (header = line 1), index+1 for JSON
    phone = models.CharField(max_length=64, blank=True)  # as given, truncated
    field = models.CharField(max_length=64)  # phone | variable name | body | row
    code = models.CharField(max_length=32)  # invalid_number, missing_variable, too_long, opted_out, ...
    message = models.CharField(max_length=255)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["campaign", "line", "field"], name="cmperr_line_unique")
        ]
        indexes = [models.Index(fields=["campaign", "line"], name="cmperr_by_line")]

    def __str__(self) -> str:
        return f"{self.campaign_id} line {self.line}: {self.code}"


class CampaignCounter(models.Model):
    """Progress by status without counting messages: each status change of a campaign message adds to
    one of a few shards (spread so concurrent send workers do not queue on one row); a read sums at
    most shards x statuses rows."""

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="counters", db_index=False)
    status = models.CharField(max_length=16)
    shard = models.PositiveSmallIntegerField()
    count = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["campaign", "status", "shard"], name="cmpcounter_unique")
        ]

    def __str__(self) -> str:
        return f"{self.campaign_id} {self.status}[{self.shard}]={self.count}"
