"""The queues' consumers in the admin, read-only for every role: which worker node consumes which queue
(their heartbeats, smsgw.observability.consumers) and which queues have messages and no consumer (the
console's "Queues without a consumer" links here)."""

from __future__ import annotations

from django.contrib import admin

from smsgw.observability.models import QueueConsumer, UnconsumedQueue


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(UnconsumedQueue)
class UnconsumedQueueAdmin(_ReadOnly):
    list_display = ("queue", "since")
    ordering = ("since",)


@admin.register(QueueConsumer)
class QueueConsumerAdmin(_ReadOnly):
    list_display = ("queue", "hostname", "seen_at", "stopped")
    list_filter = ("stopped", "queue")
    search_fields = ("hostname", "queue")
    ordering = ("queue", "hostname")
