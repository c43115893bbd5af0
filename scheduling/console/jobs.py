"""The operator jobs' pages: every bulk action over a filter (scheduling.operator_jobs), its progress and
its outcome per status. Read-only: a job is started from the message list ("select all", then an action)
and runs by itself."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import admin
from django.http import HttpResponseNotAllowed
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from scheduling.console import bulk
from scheduling.models import OperatorJob


def _utc(value) -> str:
    return f"{value:%Y-%m-%d %H:%M:%S} UTC" if value else "-"


@admin.register(OperatorJob)
class OperatorJobAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "status", "progress", "outcome", "actor", "created", "finished")
    list_filter = ("kind", "status")
    ordering = ("-id",)
    show_full_result_count = False
    fields = (
        "kind",
        "status",
        "actor",
        "matching",
        "input",
        "progress",
        "outcome",
        "outcome_by_status",
        "error",
        "created",
        "last_progress",
        "finished",
    )
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        if request.method == "POST":  # read-only: a job runs by itself
            return HttpResponseNotAllowed(["GET"])
        return super().changeform_view(request, object_id, form_url, extra_context)

    @admin.display(description="messages")
    def matching(self, obj):
        query = obj.selection.get("query", {})
        url = reverse("admin:scheduling_message_changelist") + (
            "?" + urlencode(query, doseq=True) if query else ""
        )
        return format_html(
            '{} (up to message id {}): <a href="{}">the list</a>',
            obj.selection.get("description", ""),
            obj.last_id,
            url,
        )

    @admin.display(description="input")
    def input(self, obj):
        data = obj.data or {}
        if "shift_seconds" in data:
            return f"each shifted by {data['shift_seconds']} s"
        if "send_at" in data:
            return f"to {data['send_at']} ({data.get('timezone', '')})"
        return "-"

    @admin.display(description="progress")
    def progress(self, obj):
        shown = min(obj.processed, obj.total) if obj.total else obj.processed
        percent = f" ({100 * shown // obj.total}%)" if obj.total else ""
        return f"{obj.processed} of {obj.total}{percent}"

    @admin.display(description="outcome")
    def outcome(self, obj):
        if not obj.counts:
            return "-"
        return bulk.counts_text(bulk.OPERATIONS[obj.kind], obj.counts)

    @admin.display(description="outcome by status")
    def outcome_by_status(self, obj):
        if not obj.counts:
            return "-"
        counts: dict[str, int] = obj.counts
        rows = sorted(counts.items(), key=lambda item: -item[1])
        return format_html("<table>{}</table>", format_html_join("", "<tr><td>{}</td><td>{}</td></tr>", rows))

    @admin.display(description="created (UTC)", ordering="created_at")
    def created(self, obj):
        return _utc(obj.created_at)

    @admin.display(description="last progress (UTC)")
    def last_progress(self, obj):
        return _utc(obj.updated_at)

    @admin.display(description="finished (UTC)")
    def finished(self, obj):
        return _utc(obj.finished_at)


__all__ = ["OperatorJobAdmin"]
