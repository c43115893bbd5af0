from django.contrib import admin, messages

from receipts.models import ReceiptEvent, WebhookDelivery, WebhookStatus
from receipts.webhooks import webhook_replay


@admin.register(ReceiptEvent)
class ReceiptEventAdmin(admin.ModelAdmin):
    list_display = (
        "provider_message_id",
        "raw_status",
        "normalized_status",
        "error_code",
        "outcome",
        "received_at",
        "processed_at",
    )
    list_filter = ("outcome", "normalized_status", "provider")
    search_fields = ("=provider_message_id",)
    show_full_result_count = False

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    # History: never added or deleted by hand (a deleted receipt would be taken for a new one).
    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = (
        "webhook_id",
        "tenant",
        "event_type",
        "status",
        "attempts",
        "last_status_code",
        "next_attempt_at",
        "delivered_at",
    )
    list_filter = ("status", "tenant")
    search_fields = ("=webhook_id",)
    actions = ("replay",)
    show_full_result_count = False

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    # History: never added or deleted by hand (a deleted receipt would be taken for a new one).
    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Replay selected deliveries (same webhook-id)")
    def replay(self, request, queryset):
        count = 0
        for delivery in queryset.exclude(status=WebhookStatus.PENDING):
            webhook_replay(tenant=None, webhook_id=delivery.webhook_id)
            self.log_change(request, delivery, f"replayed webhook {delivery.webhook_id}")  # audit trail
            count += 1
        self.message_user(request, f"{count} deliveries queued again.", messages.SUCCESS)
