"""An operator job: one bulk cancel, reschedule or replay over a filter of the message list, run by a
worker in chunks (scheduling.operator_jobs.runner); and the record of who opened a message's page.
Models of the ``scheduling`` app (its migrations), re-exported by ``scheduling.models``."""

from __future__ import annotations

from django.db import models


class OperatorJobKind(models.TextChoices):
    CANCEL = "cancel"
    RESCHEDULE = "reschedule"
    REPLAY = "replay"


class OperatorJobStatus(models.TextChoices):
    RUNNING = "running"  # chunks are being applied (or wait for a worker to go on)
    COMPLETED = "completed"  # every matching message up to ``last_id`` was considered once
    FAILED = "failed"  # could not go on (see ``error``); what was applied stays applied


class OperatorJob(models.Model):
    """What a bulk action over the admin's filter does, where it got to and what came of it.

    ``cursor`` is the id of the last message considered: each chunk applies its messages, adds their
    outcomes to ``counts`` and moves the cursor in one transaction, so a job resumed after its worker
    died goes on after the last committed chunk and never acts on a message twice."""

    kind = models.CharField(max_length=16, choices=OperatorJobKind.choices)
    status = models.CharField(
        max_length=16, choices=OperatorJobStatus.choices, default=OperatorJobStatus.RUNNING
    )
    # Who asked: the timeline's actor (``admin:<username>``) and the admin user (for the audit entry and
    # to read the filter as that person's changelist did).
    actor = models.CharField(max_length=64)
    user = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    # The changelist's filter as it was asked for: {"query": {param: value}, "description": "..."}.
    selection = models.JSONField(default=dict)
    # The action's own input: reschedule's {"send_at", "timezone"} or {"shift_seconds"}.
    data = models.JSONField(default=dict, blank=True)
    # Messages made after the job was asked for are not touched: the filter is applied up to this id.
    last_id = models.BigIntegerField(default=0)
    cursor = models.BigIntegerField(default=0)
    total = models.IntegerField(default=0)  # matched when asked for (the confirmation page's count)
    processed = models.IntegerField(default=0)
    # Outcome per status: {"changed": n, "already:cancelled": n, "refused:sending": n, "error:<why>": n}.
    counts = models.JSONField(default=dict, blank=True)
    error = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()  # each committed chunk: a running job older than this is stale
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "scheduling"
        indexes = [
            models.Index(
                fields=["updated_at"],
                name="opjob_running",
                condition=models.Q(status="running"),
            )
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} job {self.pk}"


class MessageView(models.Model):
    """Someone opened a message's page in the admin (its full number and body): who, when, which
    message. Read by the ``admin`` role (docs/admin.md, "Who looked"). No foreign key to the message: the
    record outlives the message's move to history or its erasure."""

    user = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    username = models.CharField(max_length=150)  # kept when the account is deleted
    message_public_id = models.CharField(max_length=32)
    tenant_id = models.BigIntegerField(null=True)
    viewed_at = models.DateTimeField()

    class Meta:
        app_label = "scheduling"
        indexes = [
            models.Index(fields=["message_public_id", "-id"], name="msgview_message"),
            models.Index(fields=["username", "-id"], name="msgview_user"),
        ]

    def __str__(self) -> str:
        return f"{self.username} viewed {self.message_public_id}"
