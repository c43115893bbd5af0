from django.contrib import admin

from delivery.models import Attempt
from scheduling.models import Message, MessageEvent, Schedule, ScheduleVersion


class EventInline(admin.TabularInline):
    model = MessageEvent
    extra = 0
    can_delete = False
    readonly_fields = ("created_at", "kind", "from_status", "to_status", "actor", "details")
    ordering = ("id",)

    def has_add_permission(self, request, obj=None):
        return False


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    readonly_fields = (
        "number",
        "provider",
        "outcome",
        "started_at",
        "finished_at",
        "http_status",
        "provider_code",
        "provider_message_id",
        "latency_ms",
    )
    exclude = ("response", "idempotency_token", "route")

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    # Read-only here: status changes go through the transitions module (operator actions come later).
    list_display = ("public_id", "tenant", "status", "priority", "due_at", "sent_at", "provider_message_id")
    list_filter = ("status", "priority", "tenant")
    search_fields = ("=public_id", "=to", "=provider_message_id")
    inlines = (AttemptInline, EventInline)
    show_full_result_count = False

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]


class ScheduleVersionInline(admin.TabularInline):
    model = ScheduleVersion
    extra = 0
    can_delete = False
    readonly_fields = ("number", "change", "status", "changed_fields", "actor", "created_at", "definition")
    ordering = ("number",)

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    # Read-only: changes go through scheduling.schedules (versions, occurrence cancellation).
    list_display = ("public_id", "tenant", "status", "version", "rrule", "timezone", "next_occurrence_at")
    list_filter = ("status", "tenant")
    search_fields = ("=public_id", "=to")
    inlines = (ScheduleVersionInline,)
    show_full_result_count = False

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]
