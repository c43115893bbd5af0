"""Retention in the operator console: each tenant's horizons (an inline on the tenant, config.admin),
history (read-only: the record of what a message was), the retention audit (read-only) and the daily
exports (read-only: written by the retention job, removed at their expiry, retention.exports). A
superuser sees them; the operator roles get them once smsgw.console.roles lists them (a roles
migration)."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.template.defaultfilters import filesizeformat

from retention.horizons import MAX_DAYS, defaults
from retention.models import Export, MessageHistory, RetentionAudit, TenantRetention


class TenantRetentionForm(forms.ModelForm):
    class Meta:
        model = TenantRetention
        fields = ("content_days", "record_days")

    def clean(self):
        data = super().clean() or {}
        base = defaults()
        for name in ("content_days", "record_days"):
            value = data.get(name)
            if value is not None and not 1 <= value <= MAX_DAYS:
                self.add_error(name, f"from 1 to {MAX_DAYS} days, or empty for the default")
        content = data.get("content_days") or base.content_days
        record = data.get("record_days") or base.record_days
        if record < content:
            self.add_error("record_days", f"must be at least the content horizon ({content} days)")
        return data


class TenantRetentionInline(admin.StackedInline):
    model = TenantRetention
    form = TenantRetentionForm
    can_delete = True
    max_num = 1
    extra = 0
    verbose_name_plural = "retention (empty: the gateway's defaults, docs/retention.md)"


class ReadOnlyAdmin(admin.ModelAdmin):
    """Written by the services only (the retention job, the APIs); operators read."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(MessageHistory)
class MessageHistoryAdmin(ReadOnlyAdmin):
    list_display = ("public_id", "tenant_id", "to", "status", "finished_at", "purge_on", "redact_on")
    list_filter = ("status",)
    search_fields = ("=public_id",)
    show_full_result_count = False  # a count over every partition is the cost history avoids

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in MessageHistory._meta.fields]


@admin.register(RetentionAudit)
class RetentionAuditAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "action", "tenant", "actor", "subject", "counts")
    list_filter = ("action",)


@admin.register(Export)
class ExportAdmin(ReadOnlyAdmin):
    list_display = ("public_id", "tenant", "day", "rows", "file_size", "created_at", "expires_at")
    list_filter = ("day",)
    search_fields = ("public_id", "tenant__slug")
    ordering = ("-id",)
    list_select_related = ("tenant",)
    readonly_fields = (
        "public_id",
        "tenant",
        "day",
        "name",
        "rows",
        "size",
        "sha256",
        "created_at",
        "expires_at",
    )
    fields = readonly_fields

    @admin.display(description="size", ordering="size")
    def file_size(self, obj: Export) -> str:
        return filesizeformat(obj.size)
