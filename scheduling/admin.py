"""The operator console for messages and schedules.

Nothing here writes a message itself: the actions call the services the tenant API calls (see
scheduling.console.bulk), "Create a message" calls the API's create (scheduling.console.create), and
every field is read-only. Messages and their timeline are never deleted from the admin: a deleted
message would answer the tenant 404 and never send its webhook.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import ClassVar
from zoneinfo import ZoneInfo

from django.conf import settings
from django.contrib import admin, messages
from django.db.models import Q
from django.http import HttpResponseNotAllowed
from django.urls import path
from django.utils.html import format_html_join

from scheduling.console import bulk as admin_bulk
from scheduling.console import campaigns as admin_campaigns
from scheduling.console import correct as admin_correct
from scheduling.console import create as admin_create
from scheduling.console import jobs as admin_jobs
from scheduling.console.filters import (
    DateRangeFilter,
    DueNowFilter,
    ErrorCodeFilter,
    FailedWithinFilter,
    ProviderFilter,
    ReasonCodeFilter,
    SentWithinFilter,
)
from scheduling.models import Message, MessageEvent, MessageView, Schedule, ScheduleStatus, ScheduleVersion
from scheduling.operator_jobs import audit as view_audit
from scheduling.schedules import service as schedules
from smsgw.domain_errors import ConflictError
from smsgw.values.phone import mask, search_forms
from smsgw.values.timeutil import TimeResolutionError, parse_timezone

BODY_PREVIEW_CHARS = 40


def _zone(name: str, fallback: str = "UTC") -> ZoneInfo:
    """A message's display zone: the IANA zone it was scheduled in, else its tenant's, else UTC (a
    stored offset such as "+02:00" from an absolute send_at names no zone)."""
    for candidate in (name, fallback, "UTC"):
        try:
            return parse_timezone(candidate)
        except TimeResolutionError:
            continue
    return ZoneInfo("UTC")


def when(value: datetime | None, zone: ZoneInfo | None = None) -> str:
    """ "2026-12-01 10:00:00 EST (America/New_York) / 15:00:00 UTC": seconds, zones labelled."""
    if value is None:
        return "-"
    utc = value.astimezone(ZoneInfo("UTC"))
    utc_text = f"{utc:%Y-%m-%d %H:%M:%S} UTC"
    if zone is None or zone.key == "UTC":
        return utc_text
    local = value.astimezone(zone)
    same_day = local.date() == utc.date()
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()} ({zone.key}) / {utc:%H:%M:%S} UTC" + (
        "" if same_day else f" {utc:%Y-%m-%d}"
    )


def _message_zone(obj: Message) -> ZoneInfo:
    return _zone(obj.requested_timezone, obj.tenant.default_timezone)


class HistoryInline(admin.TabularInline):
    """History is shown, never added, edited or deleted."""

    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class EventInline(HistoryInline):
    model = MessageEvent
    verbose_name = "timeline entry"
    verbose_name_plural = "timeline"
    fields = ("at", "kind", "change", "actor", "detail")
    readonly_fields = fields
    ordering = ("id",)

    @admin.display(description="at (UTC)")
    def at(self, obj):
        return f"{obj.created_at.astimezone(ZoneInfo('UTC')):%Y-%m-%d %H:%M:%S.%f}"[:-3]

    @admin.display(description="status")
    def change(self, obj):
        if obj.from_status == obj.to_status:
            return obj.to_status or "-"
        return f"{obj.from_status} → {obj.to_status}"

    @admin.display(description="details")
    def detail(self, obj):
        if not obj.details:
            return "-"
        return format_html_join(
            "",
            "<div><strong>{}</strong>: {}</div>",
            ((k, v if isinstance(v, str) else json.dumps(v)) for k, v in sorted(obj.details.items())),
        )


class MessageSearchMixin:
    """Search by public id, provider sid, or the recipient in any common format."""

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        numbers = search_forms(term, settings.ADMIN_PHONE_REGION)
        condition = Q(public_id=term) | Q(provider_message_id=term)
        if numbers:
            condition |= Q(to__in=numbers)
        return queryset.filter(condition), False


@admin.register(Message)
class MessageAdmin(MessageSearchMixin, admin.ModelAdmin):
    list_display = (
        "public_id",
        "recipient",
        "body_preview",
        "status",
        "priority",
        "tenant",
        "due",
        "created",
    )
    list_filter = (
        "status",
        ReasonCodeFilter,
        "priority",
        "tenant",
        # The console's landing page links here with these (reporting.console).
        DueNowFilter,
        SentWithinFilter,
        FailedWithinFilter,
        ProviderFilter,
        ErrorCodeFilter,
        ("due_at", DateRangeFilter),
        ("created_at", DateRangeFilter),
    )
    list_select_related = ("tenant",)
    search_fields = ("=public_id",)  # shows the box; get_search_results decides what matches
    search_help_text = (
        "Message id, provider SID, or recipient number in any format: +1 415 555 0123, (415) 555-0123"
    )
    ordering = ("-id",)
    show_full_result_count = False
    list_per_page = 100
    actions = ("cancel_messages", "reschedule_messages", "replay_messages")
    # delivery/admin.py puts the attempts first (delivery owns them; this module does not import it).
    inlines: ClassVar[tuple[type[admin.options.InlineModelAdmin], ...]] = (EventInline,)
    fieldsets = (
        (
            "Request",
            {
                "fields": (
                    "public_id",
                    "tenant",
                    "to",
                    "from_number",
                    "sender_pool",
                    "body",
                    "encoding",
                    "segments",
                    "priority",
                    "metadata",
                    "idempotency_key",
                )
            },
        ),
        (
            "Status",
            {
                "fields": (
                    "status",
                    "status_reason",
                    "reason_code",
                    "version",
                    "attempt_count",
                    "provider_calls",
                    "deleted_at",
                )
            },
        ),
        (
            "Timing",
            {
                "fields": (
                    "due",
                    "requested_send_at",
                    "requested_timezone",
                    "dst_policy",
                    "dst_adjustment",
                    "quiet_hours",
                    "expires",
                    "run_after_shown",
                    "created",
                    "updated",
                )
            },
        ),
        (
            "Provider",
            {
                "fields": (
                    "provider",
                    "provider_message_id",
                    "provider_status",
                    "error_code",
                    "milestones",
                )
            },
        ),
        (
            "Recurrence",
            {"classes": ("collapse",), "fields": ("schedule", "occurrence_key", "schedule_version")},
        ),
        # The campaign only: its key is the recipient's number (shown masked above).
        ("Campaign", {"classes": ("collapse",), "fields": ("campaign",)}),
    )

    def get_readonly_fields(self, request, obj=None):
        names = [f for fields in (fs[1]["fields"] for fs in self.fieldsets) for f in fields]
        return names

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_urls(self):
        own = [
            path(
                "create/",
                self.admin_site.admin_view(lambda request: admin_create.create_view(self, request)),
                name="scheduling_message_create",
            ),
            path(
                "<path:object_id>/correct/",
                self.admin_site.admin_view(
                    lambda request, object_id: admin_correct.correct_view(self, request, object_id)
                ),
                name="scheduling_message_correct",
            ),
        ]
        return own + super().get_urls()

    def changelist_view(self, request, extra_context=None):
        # "Create a message" (scheduling.console.create): the operators', through the API's create.
        extra_context = {**(extra_context or {}), "can_create_message": self.has_change_permission(request)}
        return super().changelist_view(request, extra_context)

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        # A save would write the whole row as read, over whatever the sweep or a worker changed since:
        # nothing is saved here, status changes only through the actions (and so the transitions).
        if request.method == "POST":
            return HttpResponseNotAllowed(["GET"])
        return super().changeform_view(request, object_id, form_url, extra_context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        # Every field is read-only: no save buttons (operators act through the actions).
        extra_context = {
            **(extra_context or {}),
            # Buttons above the page for the actions that apply to this message's status; each opens
            # the same confirmation page as the list's action.
            "message_actions": [
                (op.name, op.verb, sorted(op.eligible))
                for op in (admin_bulk.CANCEL, admin_bulk.RESCHEDULE, admin_bulk.REPLAY)
            ],
            "show_save": False,
            "show_save_and_continue": False,
            "show_save_and_add_another": False,
            "show_delete": False,
        }
        response = super().change_view(request, object_id, form_url, extra_context)
        if response.status_code == 200 and str(object_id).isdigit():
            # The page shows the full number and body: who opened it, and when, is kept (Who looked).
            view_audit.message_viewed(user=request.user, message_pk=int(object_id))
        return response

    # --- columns ---
    @admin.display(description="recipient", ordering="to")
    def recipient(self, obj):
        return mask(obj.to)

    @admin.display(description="body")
    def body_preview(self, obj):
        text = " ".join(obj.body.split())
        return text if len(text) <= BODY_PREVIEW_CHARS else text[: BODY_PREVIEW_CHARS - 1] + "…"

    @admin.display(description="due (local / UTC)", ordering="due_at")
    def due(self, obj):
        return when(obj.due_at, _message_zone(obj))

    @admin.display(description="created (UTC)", ordering="created_at")
    def created(self, obj):
        return when(obj.created_at)

    @admin.display(description="updated (UTC)")
    def updated(self, obj):
        return when(obj.updated_at)

    @admin.display(description="expires (local / UTC)")
    def expires(self, obj):
        return when(obj.expires_at, _message_zone(obj))

    @admin.display(description="next sweep check (UTC)")
    def run_after_shown(self, obj):
        return when(obj.run_after)

    @admin.display(description="quiet hours")
    def quiet_hours(self, obj):
        if not obj.quiet_timezone:
            return "-"
        moved = ""
        if obj.quiet_deferred_from:
            moved = f"; moved from {when(obj.quiet_deferred_from, _message_zone(obj))}"
        return f"{obj.quiet_start:%H:%M}-{obj.quiet_end:%H:%M} {obj.quiet_timezone}{moved}"

    @admin.display(description="milestones (UTC)")
    def milestones(self, obj):
        stamps = [
            (name, getattr(obj, f"{name}_at"))
            for name in ("queued", "sending", "sent", "delivered", "failed", "cancelled", "expired")
        ]
        return format_html_join("", "<div>{}: {}</div>", ((n, when(v)) for n, v in stamps if v)) or "-"

    # --- actions (the same services as the API; see scheduling.console.bulk) ---
    # Ticked messages change in the request; "select all" (every message the filter matches, any number)
    # starts a background job (scheduling.operator_jobs).
    @admin.action(description="Cancel selected messages", permissions=["change"])
    def cancel_messages(self, request, queryset):
        return admin_bulk.run(self, request, queryset, admin_bulk.CANCEL)

    @admin.action(description="Reschedule selected messages", permissions=["change"])
    def reschedule_messages(self, request, queryset):
        return admin_bulk.run(self, request, queryset, admin_bulk.RESCHEDULE)

    @admin.action(description="Replay selected failed messages (dead letter)", permissions=["change"])
    def replay_messages(self, request, queryset):
        return admin_bulk.run(self, request, queryset, admin_bulk.REPLAY)


@admin.register(MessageView)
class MessageViewAdmin(admin.ModelAdmin):
    """Who opened which message's page, and when: read-only, seen by the ``admin`` role only."""

    list_display = ("viewed", "username", "message", "tenant_id")
    search_fields = ("=message_public_id", "=username")
    search_help_text = "Message id (msg_…) or username"
    ordering = ("-id",)
    show_full_result_count = False
    list_per_page = 100
    fields = ("viewed", "username", "message", "tenant_id")
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="viewed (UTC)", ordering="viewed_at")
    def viewed(self, obj):
        return when(obj.viewed_at)

    @admin.display(description="message", ordering="message_public_id")
    def message(self, obj):
        return obj.message_public_id


class ScheduleVersionInline(HistoryInline):
    model = ScheduleVersion
    fields = ("number", "change", "status", "changed_fields", "actor", "created_at", "definition")
    readonly_fields = fields
    ordering = ("number",)


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    # Read-only: changes go through scheduling.schedules.service (versions, occurrence cancellation).
    list_display = ("public_id", "tenant", "status", "version", "rrule", "timezone", "next_occurrence_at")
    list_filter = ("status", "tenant")
    search_fields = ("=public_id",)
    inlines = (ScheduleVersionInline,)
    show_full_result_count = False
    actions = ("pause_schedules", "resume_schedules", "cancel_schedules")

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        if request.method == "POST":  # read-only: changes go through scheduling.schedules.service
            return HttpResponseNotAllowed(["GET"])
        return super().changeform_view(request, object_id, form_url, extra_context)

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        numbers = search_forms(term, settings.ADMIN_PHONE_REGION)
        return queryset.filter(Q(public_id=term) | Q(to__in=numbers)), False

    def _each(self, request, queryset, service, done: str, statuses):
        actor = admin_bulk.operator_actor(request)
        changed, refused = 0, 0
        skipped = queryset.exclude(status__in=statuses).count()  # before: the loop changes statuses
        for schedule in list(queryset.select_related("tenant").filter(status__in=statuses)):
            try:
                service(tenant=schedule.tenant, public_id=schedule.public_id, actor=actor)
            except ConflictError:
                refused += 1
                continue
            changed += 1
            self.log_change(request, schedule, f"{done} ({actor})")
        text = f"{done.capitalize()} {changed} schedules"
        if refused or skipped:
            text += f"; {refused + skipped} could not be {done}"
        self.message_user(request, text + ".", messages.SUCCESS)

    @admin.action(description="Pause selected schedules", permissions=["change"])
    def pause_schedules(self, request, queryset):
        self._each(request, queryset, schedules.schedule_pause, "paused", [ScheduleStatus.ACTIVE])

    @admin.action(description="Resume selected schedules", permissions=["change"])
    def resume_schedules(self, request, queryset):
        self._each(request, queryset, schedules.schedule_resume, "resumed", [ScheduleStatus.PAUSED])

    @admin.action(
        description="Cancel selected schedules and their pending occurrences", permissions=["change"]
    )
    def cancel_schedules(self, request, queryset):
        live = [ScheduleStatus.ACTIVE, ScheduleStatus.PAUSED]
        self._each(request, queryset, schedules.schedule_cancel, "cancelled", live)


__all__ = ["MessageAdmin", "MessageViewAdmin", "ScheduleAdmin", "admin_campaigns", "admin_jobs", "when"]
