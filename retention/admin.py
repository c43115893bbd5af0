"""The daily exports in the admin: a read-only list. Exports are written by the retention job and
removed at their expiry (retention.exports); nothing is added, edited or deleted here. A superuser sees
them; the operator roles get them once smsgw.console.roles lists them (a roles migration)."""

from __future__ import annotations

from django.contrib import admin
from django.template.defaultfilters import filesizeformat

from retention.models import Export


@admin.register(Export)
class ExportAdmin(admin.ModelAdmin):
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

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
