"""The periodic tasks smsgw installs (settings.CELERY_BEAT_SCHEDULE: the sweep, materialize, receipts,
webhooks, probes) cannot be disabled, edited or deleted from the admin: a disabled sweep silently stops
all sending. django-celery-beat's DatabaseScheduler writes these rows from the settings at start-up, so
the settings are where they change. Other periodic tasks an operator adds stay fully editable."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin, messages
from django_celery_beat.admin import IntervalScheduleAdmin, PeriodicTaskAdmin
from django_celery_beat.models import IntervalSchedule, PeriodicTask


def builtin_task_names() -> frozenset[str]:
    return frozenset(getattr(settings, "CELERY_BEAT_SCHEDULE", {}))


class GuardedPeriodicTaskAdmin(PeriodicTaskAdmin):
    list_display = ("name", "builtin", *PeriodicTaskAdmin.list_display[1:])

    @admin.display(boolean=True, description="built in")
    def builtin(self, obj):
        return obj.name in builtin_task_names()

    def _is_builtin(self, obj) -> bool:
        return obj is not None and obj.name in builtin_task_names()

    def has_delete_permission(self, request, obj=None):
        return not self._is_builtin(obj) and super().has_delete_permission(request, obj)

    def has_change_permission(self, request, obj=None):
        return not self._is_builtin(obj) and super().has_change_permission(request, obj)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        obj = self.get_object(request, object_id)
        if self._is_builtin(obj):
            self.message_user(
                request,
                "Built-in task: it is defined by smsgw's settings (CELERY_BEAT_SCHEDULE) and cannot be "
                "disabled, changed or deleted here.",
                messages.WARNING,
            )
        return super().change_view(request, object_id, form_url, extra_context)

    def _without_builtin(self, request, queryset, verb: str):
        builtin = queryset.filter(name__in=builtin_task_names())
        names = sorted(builtin.values_list("name", flat=True))
        if names:
            self.message_user(
                request, f"Not {verb} (built in, always on): {', '.join(names)}.", messages.WARNING
            )
        return queryset.exclude(name__in=builtin_task_names())

    @admin.action(description="Disable selected tasks (built-in tasks stay on)")
    def disable_tasks(self, request, queryset):
        return super().disable_tasks(request, self._without_builtin(request, queryset, "disabled"))

    @admin.action(description="Toggle activity of selected tasks (built-in tasks stay on)")
    def toggle_tasks(self, request, queryset):
        return super().toggle_tasks(request, self._without_builtin(request, queryset, "toggled"))

    def delete_queryset(self, request, queryset):
        super().delete_queryset(request, self._without_builtin(request, queryset, "deleted"))


class GuardedIntervalScheduleAdmin(IntervalScheduleAdmin):
    """An interval that a built-in task runs on is not edited or deleted either: deleting it would
    delete the task with it (the foreign key cascades), and editing it would slow the sweep."""

    def _is_builtin(self, obj) -> bool:
        return (
            obj is not None
            and PeriodicTask.objects.filter(interval=obj, name__in=builtin_task_names()).exists()
        )

    def has_delete_permission(self, request, obj=None):
        return not self._is_builtin(obj) and super().has_delete_permission(request, obj)

    def has_change_permission(self, request, obj=None):
        return not self._is_builtin(obj) and super().has_change_permission(request, obj)

    def delete_queryset(self, request, queryset):
        used = PeriodicTask.objects.filter(name__in=builtin_task_names()).values("interval_id")
        kept = queryset.filter(id__in=used)
        if kept.exists():
            self.message_user(request, "Intervals used by built-in tasks were kept.", messages.WARNING)
        super().delete_queryset(request, queryset.exclude(id__in=used))


admin.site.unregister(PeriodicTask)
admin.site.register(PeriodicTask, GuardedPeriodicTaskAdmin)
admin.site.unregister(IntervalSchedule)
admin.site.register(IntervalSchedule, GuardedIntervalScheduleAdmin)
