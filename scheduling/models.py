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

from django.conf import settings
from django.db import models
from django.db.models import Q

from scheduling.campaigns.models import Campaign as Campaign
from scheduling.campaigns.models import CampaignCounter as CampaignCounter
from scheduling.campaigns.models import CampaignError as CampaignError
from scheduling.campaigns.models import CampaignRange as CampaignRange
from scheduling.campaigns.models import CampaignStatus as CampaignStatus
from scheduling.campaigns.models import CampaignTimeMode as CampaignTimeMode
from scheduling.campaigns.models import CampaignUpload as CampaignUpload
from scheduling.campaigns.models import new_campaign_id as new_campaign_id
from scheduling.choices import TERMINAL_STATUSES as TERMINAL_STATUSES
from scheduling.choices import Priority as Priority
from scheduling.choices import Status as Status
from scheduling.operator_jobs.models import MessageView as MessageView
from scheduling.operator_jobs.models import OperatorJob as OperatorJob
from scheduling.operator_jobs.models import OperatorJobKind as OperatorJobKind
from scheduling.operator_jobs.models import OperatorJobStatus as OperatorJobStatus
from smsgw.models import Tenant


def provider_default() -> str:
    """The provider a new message is sent through (SMSGW_PROVIDER). Set when the message is born and
    never changed: capacity, circuit state, the adapter and its callbacks all hang on it."""
    return settings.SMSGW_PROVIDER


def new_public_id() -> str:
    return "msg_" + secrets.token_hex(12)


class Message(models.Model):
    public_id = models.CharField(max_length=32, unique=True, default=new_public_id, editable=False)
    # No separate index on tenant_id: msg_tenant_recent (tenant, -id) serves every tenant lookup, and each
    # index costs an entry per status change (status updates cannot be HOT; status is in index predicates).
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="messages", db_index=False)

    to = models.CharField(max_length=20)
    from_number = models.CharField(max_length=32, blank=True)
    # The pool the provider picks the sender from when there is no from_number (a Twilio Messaging
    # Service). The tenant APIs show it under Twilio's name (scheduling.facade.names).
    # The column keeps its old name until the release after this one (docs/deploy.md, "Rolling out a
    # release": nothing renamed that the previous release still reads).
    sender_pool = models.CharField(max_length=64, blank=True, db_column="messaging_service_sid")
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
    # Machine-readable reason beside the text (opted_out, provider_throttled, provider_hold, ...).
    reason_code = models.CharField(max_length=32, blank=True, default="", db_default="")
    version = models.PositiveIntegerField(default=1)
    run_after = models.DateTimeField(null=True, blank=True)
    # Attempts charged against the retry budget; provider_calls counts every call (throttled ones and
    # account faults are not charged) and numbers the Attempt rows.
    attempt_count = models.PositiveSmallIntegerField(default=0)
    provider_calls = models.PositiveSmallIntegerField(default=0, db_default=0)

    provider = models.CharField(max_length=32, default=provider_default)
    # Its route (delivery.routing): the rule that matched when it was born ("" = none: the default provider
    # with the message's own sender), the legs it may go through in order ({provider, account, from,
    # pool}), and the leg it is on. ``provider``, ``from_number`` and ``sender_pool`` are the current
    # leg's; a failover moves them to the next leg's and says so in the timeline.
    route = models.CharField(max_length=80, blank=True, default="", db_default="")
    route_plan = models.JSONField(default=list, blank=True)
    route_leg = models.PositiveSmallIntegerField(default=0, db_default=0)
    provider_message_id = models.CharField(max_length=64, null=True, blank=True)
    provider_status = models.CharField(max_length=32, blank=True)
    error_code = models.CharField(max_length=32, blank=True)
    # The tenant's shorter wait before a submission whose answer was lost may be sent again (null: the
    # gateway's list-lag bound; delivery.sending.reconcile): a one-time code, where late is worse than a
    # rare duplicate.
    uncertain_wait_seconds = models.PositiveIntegerField(null=True, blank=True)
    # Twilio's StatusCallback (scheduling.facade): each status change Twilio would call back about is
    # POSTed there, form-encoded and signed (receipts.webhooks); empty = none.
    status_callback = models.CharField(max_length=1024, blank=True, default="", db_default="")
    # Twilio's ContentRetention / AddressRetention (scheduling.facade.requests): "discard" empties the
    # body once the provider has taken the message, "obfuscate" masks the number once it is final
    # (retention.requested, a status listener; docs/erasure.md). "retain": the tenant's horizons only.
    content_retention = models.CharField(max_length=8, default="retain", db_default="retain")
    address_retention = models.CharField(max_length=10, default="retain", db_default="retain")

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    # When its send task was last published (scheduling.dispatch.recovery: re-publish only what the broker
    # lost).
    published_at = models.DateTimeField(null=True, blank=True)
    sending_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)

    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    request_fingerprint = models.CharField(max_length=64, blank=True)
    # Deleted by the tenant (the Twilio-compatible DELETE, scheduling.messages.final.message_delete):
    # gone from its API (404, left out of lists), its content erased, the row, timeline and attempts kept
    # as the audit trail that operators see in the admin.
    deleted_at = models.DateTimeField(null=True, blank=True)

    # Recurring occurrences (scheduling.schedules.materialize): the schedule, the version the occurrence was
    # made under, and its deterministic key "<schedule id>:<local occurrence time>:v<version>", unique per
    # schedule so a re-run or crashed materializer can never create a second row for one occurrence.
    schedule = models.ForeignKey(
        "Schedule",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="occurrences",
        db_index=False,  # msg_occurrence_key_unique (schedule, occurrence_key) serves schedule lookups
    )
    occurrence_key = models.CharField(max_length=80, null=True, blank=True)
    schedule_version = models.PositiveIntegerField(null=True, blank=True)
    # Campaign recipients (scheduling.campaigns.service): the campaign and the recipient's key in it, the
    # E.164 number (duplicates sent once) or "line:<n>" (allow_duplicates), unique per campaign so a resumed
    # or re-run creation job can never make a second message for one recipient.
    campaign = models.ForeignKey(
        "Campaign",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="messages",
        db_index=False,  # msg_campaign_key_unique and msg_campaign_status serve campaign lookups
    )
    campaign_key = models.CharField(max_length=32, null=True, blank=True)
    # Quiet hours (scheduling.dispatch.quiet): the window that applies, copied from the tenant or request
    # policy when the message was scheduled (quiet_timezone is empty when none applies), and the due time
    # before the first move into the window's end.
    quiet_start = models.TimeField(null=True, blank=True)
    quiet_end = models.TimeField(null=True, blank=True)
    quiet_timezone = models.CharField(max_length=64, blank=True, default="", db_default="")
    quiet_deferred_from = models.DateTimeField(null=True, blank=True)
    # The confirmation of a keyword (inbound.replies: the answer to STOP, START, HELP) is sent to a
    # recipient the suppression list may cover for this very sender: the opt-out it confirms (Rock #7049).
    # Only that message skips the suppression checks (acceptance is never asked for it; the send batch's
    # screening passes it). Set by smsgw alone, never from a request, and a tenant cannot edit such a
    # message (scheduling.messages.edits).
    exempt_suppression = models.BooleanField(default=False, db_default=False)
    # The W3C traceparent of the span the message was accepted in (smsgw.tracing; "" when tracing is off
    # or the request was not sampled): the sweep, send, provider, receipt and webhook spans, possibly days
    # later, link to it, and its trace id is on the timeline entries (``details.trace_id``).
    trace_context = models.CharField(max_length=55, blank=True, default="", db_default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="msg_idempotency_key_per_tenant",
            ),
            # The provider's id first: receipts and look-ups name messages by it, and a batch of them is
            # then one index probe per id whatever the planner's statistics say (with the provider first,
            # statistics taken before the sends made PostgreSQL walk every row of the provider).
            models.UniqueConstraint(
                fields=["provider_message_id", "provider"],
                condition=Q(provider_message_id__isnull=False),
                name="msg_provider_sid_unique",
            ),
            models.UniqueConstraint(
                fields=["schedule", "occurrence_key"],
                condition=Q(schedule__isnull=False),
                name="msg_occurrence_key_unique",
            ),
            models.UniqueConstraint(
                fields=["campaign", "campaign_key"],
                condition=Q(campaign__isnull=False),
                name="msg_campaign_key_unique",
            ),
        ]
        indexes = [
            # A campaign's messages by status, newest first (GET .../messages?status=, pause, cancel).
            models.Index(
                fields=["campaign", "status", "-id"],
                name="msg_campaign_status",
                condition=Q(campaign__isnull=False),
            ),
            # Sweep: due scheduled work, per priority class, oldest first.
            models.Index(
                fields=["priority", "run_after"], name="msg_scheduled_due", condition=Q(status="scheduled")
            ),
            # Expiry (scheduling.dispatch.sweep.due_expire), every sweep pass: only the rows whose validity
            # has passed, however many wait. Without it the pass read every scheduled row (a sequential
            # scan when the statistics were taken with the table all scheduled: 14.5 ms a pass with
            # 19,000 waiting, about 0.27 of a core under `bench soak`).
            models.Index(
                fields=["status", "expires_at"],
                name="msg_waiting_expiry",
                condition=Q(status__in=["scheduled", "queued"]),
            ),
            # Recovery: queued rows whose broker message may be lost, sending rows whose lease expired.
            models.Index(fields=["run_after"], name="msg_queued_recovery", condition=Q(status="queued")),
            models.Index(fields=["run_after"], name="msg_sending_lease", condition=Q(status="sending")),
            # Status look-ups: `sent` messages oldest first (receipts.lookup), without scanning the rest.
            models.Index(fields=["sent_at"], name="msg_sent_lookup", condition=Q(status="sent")),
            models.Index(fields=["tenant", "-id"], name="msg_tenant_recent"),
            # Retention (retention.history): final messages by the time of their last change, so the move
            # to history and the content horizon read only what is old enough, never the pending rows.
            models.Index(
                fields=["updated_at"],
                name="msg_finished",
                condition=Q(status__in=["delivered", "undelivered", "failed", "cancelled", "expired"]),
            ),
            models.Index(fields=["tenant", "to", "-id"], name="msg_tenant_recipient"),
            # Release under a backlog: the tenants with due messages, walked per priority (two index
            # probes per tenant), so each tenant's oldest are in every pass (scheduling.dispatch.release).
            models.Index(
                fields=["priority", "tenant", "run_after"],
                name="msg_sched_tenant_due",
                condition=Q(status="scheduled"),
            ),
            # Messages waiting for a reason (paced, provider_unavailable, provider_hold, ...), released at
            # once when the reason ends (a circuit closes, a hold clears). Others never enter it.
            models.Index(
                fields=["reason_code", "run_after"],
                name="msg_waiting_reason",
                condition=Q(status__in=["scheduled", "queued"]) & ~Q(reason_code=""),
            ),
        ]

    def __str__(self) -> str:
        return self.public_id


class MessageEvent(models.Model):
    """Append-only timeline entry. Written only by ``scheduling.lifecycle.transitions`` and the services."""

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


class ScheduleStatus(models.TextChoices):
    ACTIVE = "active"
    PAUSED = "paused"
    ENDED = "ended"  # the rule has no further occurrence (COUNT/UNTIL reached); nothing more to make
    CANCELLED = "cancelled"


def new_schedule_id() -> str:
    return "sch_" + secrets.token_hex(12)


class Schedule(models.Model):
    """A recurring definition (docs/scheduling.md), separate from its executions: each occurrence becomes an
    ordinary Message, made ahead of time within a rolling horizon by ``scheduling.materialize``.

    The definition columns hold the current version; every change is also kept as an immutable
    ScheduleVersion. The cursor (``cursor_local`` / ``next_occurrence_at``) is the first occurrence not
    yet materialized; the materializer looks only at active schedules whose cursor is inside the
    horizon (sch_materialize_due), so a run costs what is due, not what exists.
    """

    public_id = models.CharField(max_length=32, unique=True, default=new_schedule_id, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="schedules", db_index=False)
    status = models.CharField(max_length=16, choices=ScheduleStatus.choices, default=ScheduleStatus.ACTIVE)
    version = models.PositiveIntegerField(default=1)

    to = models.CharField(max_length=20)
    from_number = models.CharField(max_length=32, blank=True)
    # The column keeps its old name until the release after this one (docs/deploy.md, "Rolling out a
    # release": nothing renamed that the previous release still reads).
    sender_pool = models.CharField(max_length=64, blank=True, db_column="messaging_service_sid")
    body = models.TextField()
    encoding = models.CharField(max_length=8)
    segments = models.PositiveSmallIntegerField()
    priority = models.CharField(max_length=16, choices=Priority.choices, default=Priority.TRANSACTIONAL)
    metadata = models.JSONField(default=dict, blank=True)
    validity_seconds = models.PositiveIntegerField()

    rrule = models.CharField(max_length=1000)  # canonical RRULE value (scheduling.schedules.rrules)
    exdate = models.JSONField(default=list, blank=True)  # local dates / date-times, ISO strings
    start_local = models.DateTimeField()  # naive local wall time (stored as UTC-less, like Message)
    timezone = models.CharField(max_length=64)
    dst_policy = models.CharField(max_length=8, default="earlier")
    # COUNT rules: the local time of the COUNT-th instance, computed once at validation.
    count_last_local = models.DateTimeField(null=True, blank=True)
    quiet_hours = models.JSONField(default=dict, blank=True)  # {} = tenant policy (scheduling.dispatch.quiet)
    recipient_timezone = models.CharField(max_length=64, blank=True)

    cursor_local = models.DateTimeField(null=True, blank=True)
    next_occurrence_at = models.DateTimeField(null=True, blank=True)
    materialized_until = models.DateTimeField(null=True, blank=True)
    materialized_count = models.PositiveIntegerField(default=0)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    paused_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    # The create request's Idempotency-Key (docs/idempotency.md): a retried POST /v1/schedules gets the
    # first schedule back instead of making a second recurring one. The fingerprint is of the request body.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    request_fingerprint = models.CharField(max_length=64, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["next_occurrence_at"], name="sch_materialize_due", condition=Q(status="active")
            ),
            models.Index(fields=["tenant", "-id"], name="sch_tenant_recent"),
        ]
        constraints = [
            # Also what settles two concurrent requests with one key: the second insert waits for the
            # first's commit, fails, and answers with the first's schedule.
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="sch_idempotency_key_per_tenant",
            ),
        ]

    def __str__(self) -> str:
        return self.public_id


class ScheduleVersion(models.Model):
    """Immutable snapshot of a schedule after each change (created, updated, paused, resumed,
    cancelled), with who made it and when. Occurrences name the version they were made under."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="versions", db_index=False)
    number = models.PositiveIntegerField()
    change = models.CharField(max_length=16)
    status = models.CharField(max_length=16)
    changed_fields = models.JSONField(default=list, blank=True)
    definition = models.JSONField()
    actor = models.CharField(max_length=64)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["schedule", "number"], name="schver_number_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id} v{self.number} {self.change}"
