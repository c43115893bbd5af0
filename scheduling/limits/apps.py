from django.apps import AppConfig


class LimitsConfig(AppConfig):
    name = "scheduling.limits"
    label = "limits"
    verbose_name = "Tenant limits: quotas and API rate limits"
    # The quota gate is the last release gate, and its listener gives back the booking of a message that
    # ends before it was submitted: both handed over by the composition root (config.wiring).
