from django.apps import AppConfig


class ObservabilityConfig(AppConfig):
    name = "smsgw.observability"
    label = "observability"
    verbose_name = "Metrics and health"
