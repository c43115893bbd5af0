"""Delivery's records: one Attempt row per provider call, committed before the call is made
(docs/architecture.md, "Send worker");
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
    # more matching copies at the provider than uncertain messages of ours: never resent, for an operator
    RECONCILED_AMBIGUOUS = "reconciled_ambiguous"


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
    # grace window later (delivery.sending.reconcile).
    lookup_absent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["message", "number"], name="attempt_number_per_message"),
        ]
        indexes = [
            models.Index(
                fields=["outcome"], name="attempt_uncertain", condition=models.Q(outcome="uncertain")
            ),
            # The attempts a provider's id names: a failed receipt marks its attempt refused
            # (receipts.processor), the reconciler finds the other attempts of what it looked up.
            # Without it each of those read every attempt ever made.
            models.Index(fields=["provider", "provider_message_id"], name="attempt_provider_sid"),
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
    scope = models.CharField(max_length=16)  # delivery.providers.base.Scope
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
    # The column keeps its old name until the release after this one (docs/deploy.md, "Rolling out a
    # release": nothing renamed that the previous release still reads).
    sender_pool = models.CharField(max_length=64, blank=True, db_column="messaging_service_sid")
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


class SenderCapacity(models.Model):
    """How fast one sender may submit, in segments per second (Twilio counts throughput in segments).
    Without a row, the default for the sender's type applies (delivery.flow.capacity). A row with no
    ``tenant`` is the operator's rate (the admin); a row with one is that tenant's own cap on a sender it
    owns alone (the API): at most the operator's rate, applied only while the tenant owns the sender
    unshared, so it never paces another tenant."""

    provider = models.CharField(max_length=32)
    account = models.CharField(max_length=64)
    sender = models.CharField(max_length=64)  # a From number, an alphanumeric sender, a messaging service
    segments_per_second = models.FloatField()
    tenant = models.ForeignKey(
        "smsgw.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="sender_capacities"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "sender capacities"
        constraints = [
            # One operator row per sender, and one cap per tenant that owns it (delivery.flow.capacity).
            models.UniqueConstraint(
                fields=["provider", "account", "sender"],
                condition=Q(tenant__isnull=True),
                name="sendercapacity_operator_unique",
            ),
            models.UniqueConstraint(
                fields=["provider", "account", "sender", "tenant"],
                condition=Q(tenant__isnull=False),
                name="sendercapacity_tenant_unique",
            ),
            models.CheckConstraint(condition=Q(segments_per_second__gt=0), name="sendercapacity_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.sender}: {self.segments_per_second:g} segments/s"


class AccountCapacity(models.Model):
    """A cap over every sender of one provider account, in segments per second."""

    provider = models.CharField(max_length=32)
    account = models.CharField(max_length=64)
    segments_per_second = models.FloatField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "account capacities"
        constraints = [
            models.UniqueConstraint(fields=["provider", "account"], name="accountcapacity_unique"),
            models.CheckConstraint(condition=Q(segments_per_second__gt=0), name="accountcapacity_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.provider}/{self.account}: {self.segments_per_second:g} segments/s"


class RateBucket(models.Model):
    """Shared pacing state of one limit (an account, a sender, a tenant), used by every sweeper on every
    host: a GCRA "theoretical arrival time" plus the adaptive rate. Locked (SELECT ... FOR UPDATE) by the
    release gate for the length of one short transaction (delivery.flow.pacing)."""

    key = models.CharField(max_length=200, unique=True)  # "<provider>|<account>|<kind>|<value>"
    kind = models.CharField(max_length=16)  # account, sender, tenant
    rate_configured = models.FloatField()  # segments/s, from the configuration at the last pass
    rate_effective = models.FloatField()  # lowered on throttling, recovering gradually (AIMD)
    tat = models.DateTimeField()  # when the next segment may go (GCRA)
    projected_until = models.DateTimeField()  # the last slot promised to a paced message
    blocked_until = models.DateTimeField(null=True, blank=True)  # Retry-After
    last_decrease_at = models.DateTimeField(null=True, blank=True)
    # The rate at which the provider last throttled: the rate climbs back quickly up to just below it,
    # then slowly (the provider's real limit is probably there).
    rate_ceiling = models.FloatField(null=True, blank=True)
    throttles = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.key


class ProviderCircuit(models.Model):
    """Circuit breaker of one provider account: closed (sending), open (nothing submitted but one probe
    per interval). Failures are counted in a fixed window (delivery.flow.circuit)."""

    provider = models.CharField(max_length=32)
    account = models.CharField(max_length=64)
    state = models.CharField(max_length=12, default="closed")
    window_started_at = models.DateTimeField()
    window_ok = models.PositiveIntegerField(default=0)
    window_failed = models.PositiveIntegerField(default=0)
    # Provider failures since the last answer that was not one: an outage trips the circuit after a
    # handful of requests, instead of waiting for failures to outnumber a window of earlier successes.
    streak_failed = models.PositiveIntegerField(default=0, db_default=0)
    opened_at = models.DateTimeField(null=True, blank=True)
    next_probe_at = models.DateTimeField(null=True, blank=True)
    probes = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=255, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["provider", "account"], name="providercircuit_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.provider}/{self.account}: {self.state}"


class ProviderHostCircuit(models.Model):
    """One host's reach to a provider account (delivery.flow.circuit): open while this host gets no answer
    at all (connections refused or timed out, reads timed out) although another host got answers in the
    window. Its own failures then stop only its own workers; the account's circuit stays closed. The
    row also says when this host last got an answer, which is how the other hosts tell the two apart."""

    provider = models.CharField(max_length=32)
    account = models.CharField(max_length=64)
    host = models.CharField(max_length=128)  # SMSGW_HOST_ID, or the machine's hostname
    state = models.CharField(max_length=12, default="closed")
    window_started_at = models.DateTimeField()
    window_ok = models.PositiveIntegerField(default=0)  # requests answered (whatever the answer)
    window_failed = models.PositiveIntegerField(default=0)  # requests with no answer, this host's own
    streak_failed = models.PositiveIntegerField(default=0)
    last_answer_at = models.DateTimeField(null=True, blank=True)
    opened_at = models.DateTimeField(null=True, blank=True)
    next_probe_at = models.DateTimeField(null=True, blank=True)
    probes = models.PositiveIntegerField(default=0)
    failed_probes = models.PositiveIntegerField(default=0)  # since it opened: the probe backoff's step
    last_error = models.CharField(max_length=255, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "account", "host"], name="providerhostcircuit_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider}/{self.account} from {self.host}: {self.state}"


class SuppressionSource(models.TextChoices):
    INBOUND_KEYWORD = "inbound_keyword"  # the recipient texted STOP/START/HELP to the sender
    PROVIDER_ERROR = "provider_error"  # the provider refused a send with 21610 (recipient unsubscribed)
    API = "api"
    OPERATOR = "operator"


class Suppression(models.Model):
    """One number a tenant must not send to, from one sender: ``sender`` is the From number or the
    messaging service SID the recipient opted out of, or empty for every sender of the tenant (added
    through the API or by an operator). Enforced at acceptance and again at execution
    (delivery.guards.suppression)."""

    tenant = models.ForeignKey("smsgw.Tenant", on_delete=models.CASCADE, related_name="+")
    number = models.CharField(max_length=20)
    sender = models.CharField(max_length=64, blank=True)
    source = models.CharField(max_length=32, choices=SuppressionSource.choices)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "number", "sender"], name="suppression_unique"),
        ]

    def __str__(self) -> str:
        return f"suppression tenant {self.tenant_id}"


class SuppressionChange(models.Model):
    """The audit trail of the suppression list: every add and remove, and every HELP received, with its
    source and actor. Never edited."""

    ADDED, REMOVED, HELP = "added", "removed", "help"

    tenant = models.ForeignKey("smsgw.Tenant", on_delete=models.CASCADE, related_name="+")
    number = models.CharField(max_length=20)
    sender = models.CharField(max_length=64, blank=True)
    action = models.CharField(max_length=16, choices=[(a, a) for a in (ADDED, REMOVED, HELP)])
    source = models.CharField(max_length=32, choices=SuppressionSource.choices)
    actor = models.CharField(max_length=200, blank=True)
    keyword = models.CharField(max_length=16, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["tenant", "number"], name="suppression_change_number")]

    def __str__(self) -> str:
        return f"{self.action} tenant {self.tenant_id}"


# The velocity guard's records live in their own module; imported here so they belong to this app.
from delivery.guards.models import (  # noqa: E402, F401
    KnownNumber,
    ReviewHold,
    ReviewHoldMessage,
    VelocityCounter,
)

# Routing rules edited in the admin (delivery.routing.rules), likewise.
from delivery.routing.models import RouteLeg, RouteRule  # noqa: E402, F401
