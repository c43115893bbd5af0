from django.contrib import admin

from smsgw.models import ApiKey, Tenant


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = (
        "slug",
        "name",
        "is_active",
        "default_from",
        "default_timezone",
        "daily_message_quota",
        "max_pending_scheduled",
        "quota_exceeded_policy",
        "created_at",
    )
    search_fields = ("slug", "name")


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("prefix", "tenant", "name", "revoked_at", "last_used_at", "created_at")
    list_filter = ("revoked_at",)
    search_fields = ("prefix", "tenant__slug")
    readonly_fields = ("prefix", "secret_hash", "last_used_at", "created_at")
