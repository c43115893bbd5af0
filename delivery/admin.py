"""Operators' view of delivery incidents: open holds (with a clear action), duplicate submissions, opt-outs
reported by the provider. Read-only; nothing here is added or deleted by hand."""

from django.contrib import admin, messages
from django.utils import timezone

from delivery.flow import capacity, circuit, host_circuit
from delivery.flow.provider_holds import hold_clear
from delivery.guards import review_holds as review
from delivery.guards import suppression
from delivery.models import (
    AccountCapacity,
    Attempt,
    DuplicateSubmission,
    OptOutSignal,
    ProviderCircuit,
    ProviderHold,
    ProviderHostCircuit,
    RateBucket,
    ReviewHold,
    SenderCapacity,
    Suppression,
    SuppressionChange,
    SuppressionSource,
)
from scheduling.admin import HistoryInline, MessageAdmin, when
from smsgw.values.phone import mask


class AttemptInline(HistoryInline):
    model = Attempt
    fields = (
        "number",
        "provider",
        "outcome",
        "started",
        "latency_ms",
        "http_status",
        "provider_code",
        "provider_message_id",
    )
    readonly_fields = fields
    ordering = ("number",)

    @admin.display(description="started (UTC)")
    def started(self, obj):
        return when(obj.started_at)


# The message page shows its attempts first, then its timeline.
MessageAdmin.inlines = (AttemptInline, *MessageAdmin.inlines)


class _ReadOnly(admin.ModelAdmin):
    show_full_result_count = False

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]


class HoldOpenFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return (("open", "open"), ("cleared", "cleared"))

    def queryset(self, request, queryset):
        if self.value() == "open":
            return queryset.filter(cleared_at__isnull=True)
        if self.value() == "cleared":
            return queryset.filter(cleared_at__isnull=False)
        return queryset


@admin.register(ProviderHold)
class ProviderHoldAdmin(_ReadOnly):
    list_display = (
        "provider",
        "account",
        "scope",
        "scope_value",
        "error_code",
        "reason",
        "opened_at",
        "last_seen_at",
        "next_probe_at",
        "probes",
        "cleared_at",
    )
    list_filter = (HoldOpenFilter, "scope", "provider")
    actions = ("clear",)

    @admin.action(description="Clear selected holds and release their messages")
    def clear(self, request, queryset):
        released = 0
        for hold in queryset.filter(cleared_at__isnull=True):
            actor = f"admin:{request.user.get_username()}"
            released += hold_clear(hold.id, by=actor, reason="cleared by an operator", now=timezone.now())
            self.log_change(request, hold, "cleared the hold")  # audit trail
        self.message_user(request, f"Released {released} held messages.", messages.SUCCESS)


@admin.register(ReviewHold)
class ReviewHoldAdmin(_ReadOnly):
    """Velocity review holds (delivery.guards.velocity): an operator looks at the held traffic and releases it
    (it goes out) or cancels it; both go through delivery.guards.review_holds and are logged here (admin
    history)."""

    list_display = (
        "id",
        "tenant",
        "rule",
        "destination",
        "limit",
        "held_count",
        "state",
        "opened_at",
        "last_held_at",
        "closed_by",
        "closed_at",
        "closed_count",
    )
    list_filter = ("state", "rule")
    search_fields = ("=tenant__slug", "prefix")
    actions = ("release", "cancel")

    @admin.display(description="destination")
    def destination(self, obj):
        return f"+{obj.prefix}…" if obj.prefix else "new numbers"

    def _close(self, request, queryset, close, verb: str):
        moved = closed = 0
        actor = f"admin:{request.user.get_username()}"
        for hold in queryset.filter(state="open"):
            try:
                n = close(hold.id, actor=actor, now=timezone.now())
            except review.ReviewHoldClosed:
                continue  # closed by someone else meanwhile
            moved += n
            closed += 1
            self.log_change(request, hold, f"{verb} the review hold ({n} messages)")  # audit trail
        self.message_user(request, f"{verb.capitalize()} {closed} holds, {moved} messages.", messages.SUCCESS)

    @admin.action(description="Release selected holds: their messages are sent", permissions=["change"])
    def release(self, request, queryset):
        self._close(request, queryset, review.review_hold_release, "released")

    @admin.action(description="Cancel selected holds: their messages are cancelled", permissions=["change"])
    def cancel(self, request, queryset):
        self._close(request, queryset, review.review_hold_cancel, "cancelled")


@admin.register(DuplicateSubmission)
class DuplicateSubmissionAdmin(_ReadOnly):
    list_display = (
        "message",
        "provider",
        "provider_message_id",
        "attempt_number",
        "detected_by",
        "detected_at",
    )
    list_filter = ("provider", "detected_by")
    search_fields = ("=provider_message_id", "=message__public_id")


@admin.register(OptOutSignal)
class OptOutSignalAdmin(_ReadOnly):
    list_display = (
        "tenant_id",
        "recipient",
        "from_number",
        "sender_pool",
        "error_code",
        "created_at",
    )
    list_filter = ("provider", "error_code")
    exclude = ("to",)

    @admin.display(description="recipient")
    def recipient(self, obj):
        return mask(obj.to)

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields if f.name != "to"] + ["recipient"]


@admin.register(SenderCapacity)
class SenderCapacityAdmin(admin.ModelAdmin):
    """Operators set any sender's rate here: a row with no tenant is the operator's rate, the ceiling of
    the caps the sender's owner may set through the API (the rows with a tenant)."""

    list_display = ("sender", "segments_per_second", "provider", "account", "tenant", "updated_at")
    list_filter = ("provider",)
    search_fields = ("=sender",)

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        capacity.cache_clear()


@admin.register(AccountCapacity)
class AccountCapacityAdmin(admin.ModelAdmin):
    list_display = ("provider", "account", "segments_per_second", "updated_at")

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        capacity.cache_clear()


@admin.register(RateBucket)
class RateBucketAdmin(_ReadOnly):
    """The pacing state, shared by every sweeper: the adaptive rate shows backpressure at work."""

    list_display = ("key", "kind", "rate_configured", "rate_effective", "throttles", "tat", "blocked_until")
    list_filter = ("kind",)
    search_fields = ("key",)


@admin.register(ProviderCircuit)
class ProviderCircuitAdmin(_ReadOnly):
    list_display = ("provider", "account", "state", "opened_at", "next_probe_at", "probes", "last_error")
    list_filter = ("state", "provider")  # the console's landing page links to ?state__exact=open
    actions = ("close",)

    @admin.action(description="Close selected circuits and release waiting messages")
    def close(self, request, queryset):
        released = 0
        for row in queryset.filter(state=circuit.OPEN):
            released += circuit.circuit_close(
                row.provider, row.account, actor=f"admin:{request.user.get_username()}"
            )
            self.log_change(request, row, "closed the circuit")  # audit trail
        self.message_user(request, f"Released {released} waiting messages.", messages.SUCCESS)


@admin.register(ProviderHostCircuit)
class ProviderHostCircuitAdmin(_ReadOnly):
    """One sending host's reach to a provider account: open while that host gets no answer at all and
    another host does (its workers park their batches for the others and probe; delivery.flow.circuit)."""

    list_display = (
        "provider",
        "account",
        "host",
        "state",
        "opened_at",
        "next_probe_at",
        "probes",
        "last_answer_at",
        "last_error",
    )
    list_filter = ("state", "provider")
    actions = ("close",)

    @admin.action(description="Close selected host circuits (the host sends again)")
    def close(self, request, queryset):
        closed = 0
        for row in queryset.filter(state=circuit.OPEN):
            if host_circuit.host_circuit_close(
                row.provider, row.account, row.host, actor=f"admin:{request.user.get_username()}"
            ):
                closed += 1
                self.log_change(request, row, "closed the host circuit")  # audit trail
        self.message_user(request, f"Closed {closed} host circuits.", messages.SUCCESS)


@admin.register(Suppression)
class SuppressionAdmin(admin.ModelAdmin):
    """The tenants' suppression lists. An operator adds or removes an entry here; both go through
    delivery.guards.suppression and are audited (Suppression changes) with the operator's name."""

    show_full_result_count = False
    list_display = ("tenant", "recipient", "sender", "source", "created_at")
    list_filter = ("source",)
    search_fields = ("=number", "=sender")
    fields = ("tenant", "number", "sender")

    @admin.display(description="recipient")
    def recipient(self, obj):
        return mask(obj.number)

    def has_change_permission(self, request, obj=None):
        return False if obj is not None else super().has_change_permission(request, obj)

    def get_readonly_fields(self, request, obj=None):
        return ("tenant", "number", "sender") if obj is not None else ()

    def save_model(self, request, obj, form, change):
        suppression.suppression_add(
            tenant_id=obj.tenant_id,
            number=obj.number,
            sender=obj.sender,
            source=SuppressionSource.OPERATOR,
            actor=f"admin:{request.user.get_username()}",
        )

    def delete_model(self, request, obj):
        suppression.suppression_remove(
            tenant_id=obj.tenant_id,
            number=obj.number,
            sender=obj.sender,
            source=SuppressionSource.OPERATOR,
            actor=f"admin:{request.user.get_username()}",
        )

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(SuppressionChange)
class SuppressionChangeAdmin(_ReadOnly):
    list_display = ("tenant", "recipient", "sender", "action", "source", "keyword", "actor", "created_at")
    list_filter = ("action", "source")
    exclude = ("number",)

    @admin.display(description="recipient")
    def recipient(self, obj):
        return mask(obj.number)

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields if f.name != "number"] + ["recipient"]


# The routing rules' pages (delivery.routing.admin) register themselves on import.
from delivery.routing import admin as routing_admin  # noqa: E402, F401
