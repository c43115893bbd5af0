"""The campaign console: campaigns with their progress (from the counters, never a count over messages),
a detail page with the definition, progress by status, rejected rows and a link to the messages, and
pause / resume / cancel actions through the API's services (scheduling.campaigns.control), each recorded
in the admin log with the operator. Registered from scheduling.admin."""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpResponseNotAllowed
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from scheduling.campaigns import control as campaign_control
from scheduling.campaigns.progress import progress_read, progress_read_many
from scheduling.console import bulk as admin_bulk
from scheduling.models import Campaign, CampaignError, CampaignRange, CampaignStatus
from smsgw.domain_errors import ConflictError

# Shown in this order in the list (the rest after, alphabetically).
PROGRESS_ORDER = ("scheduled", "queued", "sending", "sent", "delivered", "undelivered", "failed")
ERRORS_SHOWN = 20


def progress_text(progress: dict[str, int]) -> str:
    """ "1,000 total: 900 delivered, 80 scheduled, 20 failed" (largest first)."""
    total = sum(progress.values())
    if not total:
        return "no messages yet"
    parts = sorted(progress.items(), key=lambda i: (-i[1], i[0]))
    return f"{total:,} total: " + ", ".join(f"{n:,} {s}" for s, n in parts)


@admin.register(Campaign)
class CampaignAdmin(admin.ModelAdmin):
    list_display = ("public_id", "name", "tenant", "status", "progress", "created_at", "made_at")
    list_filter = ("status", "tenant")
    list_select_related = ("tenant",)
    search_fields = ("=public_id",)
    ordering = ("-id",)
    show_full_result_count = False
    list_per_page = 50
    actions = ("pause_campaigns", "resume_campaigns", "cancel_campaigns")
    fieldsets = (
        ("Campaign", {"fields": ("public_id", "tenant", "name", "status", "status_reason", "version")}),
        (
            "Progress",
            {"fields": ("progress_by_status", "messages_link", "creation", "rejected_rows")},
        ),
        (
            "Definition",
            {
                "fields": (
                    "body",
                    "is_template",
                    "variables",
                    "from_number",
                    "sender_pool",
                    "priority",
                    "validity_seconds",
                    "time_mode",
                    "requested_send_at",
                    "timezone",
                    "dst_policy",
                    "quiet_hours",
                    "allow_duplicates",
                    "metadata",
                    "source_format",
                    "created_by",
                )
            },
        ),
        (
            "Timestamps",
            {
                "fields": (
                    "created_at",
                    "updated_at",
                    "made_at",
                    "paused_at",
                    "cancelled_at",
                    "completed_at",
                )
            },
        ),
    )

    def get_readonly_fields(self, request, obj=None):
        return [f for fs in self.fieldsets for f in fs[1]["fields"]]

    def has_add_permission(self, request):
        return False  # campaigns are made through POST /v1/campaigns (the recipient list is read there)

    def has_delete_permission(self, request, obj=None):
        return False

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        if request.method == "POST":  # read-only: changes go through the actions (the services)
            return HttpResponseNotAllowed(["GET"])
        extra_context = {
            **(extra_context or {}),
            "show_save": False,
            "show_save_and_continue": False,
            "show_save_and_add_another": False,
            "show_delete": False,
        }
        return super().changeform_view(request, object_id, form_url, extra_context)

    def get_changelist_instance(self, request):
        # One counter query for the whole page, not one per row.
        cl = super().get_changelist_instance(request)
        page = list(cl.result_list)
        for campaign, progress in zip(page, _progress_of(page), strict=True):
            campaign._progress = progress
        return cl

    # --- columns and fields ---
    @admin.display(description="progress")
    def progress(self, obj):
        found = getattr(obj, "_progress", None)
        return progress_text(found if found is not None else progress_read(obj.pk))

    @admin.display(description="messages by status")
    def progress_by_status(self, obj):
        progress = progress_read(obj.pk)
        if not progress:
            return "no messages yet"
        order = [s for s in PROGRESS_ORDER if s in progress] + sorted(set(progress) - set(PROGRESS_ORDER))
        return format_html(
            "<table><tbody>{}</tbody></table>",
            format_html_join("", "<tr><td>{}</td><td>{}</td></tr>", ((s, f"{progress[s]:,}") for s in order)),
        )

    @admin.display(description="messages")
    def messages_link(self, obj):
        url = reverse("admin:scheduling_message_changelist") + f"?campaign__id__exact={obj.pk}"
        return format_html('<a href="{}">this campaign\'s messages</a>', url)

    @admin.display(description="recipient list")
    def creation(self, obj):
        text = (
            f"{obj.recipients_total:,} rows read, {obj.messages_made:,} messages made, "
            f"{obj.rows_rejected:,} rejected, {obj.duplicates_skipped:,} duplicates skipped, "
            f"{obj.recipients_skipped:,} recipients skipped"
        )
        ranges = list(CampaignRange.objects.filter(campaign=obj).values_list("done", flat=True))
        if len(ranges) > 1:
            text += f"; made in {len(ranges)} line ranges, {sum(ranges)} done"
        return text

    @admin.display(description=f"rejected rows (first {ERRORS_SHOWN})")
    def rejected_rows(self, obj):
        rows = CampaignError.objects.filter(campaign=obj).order_by("line")[:ERRORS_SHOWN]
        if not rows:
            return "-"
        # The raw phone value as given is not shown: it may be a valid number, and numbers are masked.
        return format_html_join(
            "", "<div>line {}: {} {} ({})</div>", ((e.line, e.field, e.code, e.message) for e in rows)
        )

    # --- actions (the API's services; audited in the admin log) ---
    def _each(self, request, queryset, service, done: str, statuses) -> None:
        actor = admin_bulk.operator_actor(request)
        changed, refused, notes = 0, 0, []
        skipped = queryset.exclude(status__in=statuses).count()  # before: the loop changes statuses
        for campaign in list(queryset.select_related("tenant").filter(status__in=statuses)):
            try:
                change = service(tenant=campaign.tenant, public_id=campaign.public_id, actor=actor)
            except ConflictError:
                refused += 1
                continue
            changed += 1
            if change.in_progress:
                notes.append(f"{campaign.public_id}: continuing in the background")
            self.log_change(request, campaign, f"{done} ({actor})")
        text = f"{done.capitalize()} {changed} campaigns"
        if refused or skipped:
            text += f"; {refused + skipped} could not be {done}"
        if notes:
            text += "; " + "; ".join(notes)
        self.message_user(
            request, text + ".", messages.SUCCESS if not (refused or skipped) else messages.WARNING
        )

    @admin.action(description="Pause selected campaigns", permissions=["change"])
    def pause_campaigns(self, request, queryset):
        live = [CampaignStatus.CREATING, CampaignStatus.ACTIVE]
        self._each(request, queryset, campaign_control.campaign_pause, "paused", live)

    @admin.action(description="Resume selected campaigns", permissions=["change"])
    def resume_campaigns(self, request, queryset):
        self._each(request, queryset, campaign_control.campaign_resume, "resumed", [CampaignStatus.PAUSED])

    @admin.action(description="Cancel selected campaigns and their pending messages", permissions=["change"])
    def cancel_campaigns(self, request, queryset):
        live = [CampaignStatus.CREATING, CampaignStatus.ACTIVE, CampaignStatus.PAUSED]
        self._each(request, queryset, campaign_control.campaign_cancel, "cancelled", live)


def _progress_of(page: list[Campaign]) -> list[dict[str, int]]:
    found = progress_read_many([c.pk for c in page])
    return [found.get(c.pk, {}) for c in page]
