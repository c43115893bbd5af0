from django.apps import AppConfig


class SmsgwConfig(AppConfig):
    name = "smsgw"
    verbose_name = "Tenants and API keys"

    def ready(self):
        # Registers the OpenAPI extension for the API key scheme (drf-spectacular finds it by import).
        from smsgw.http import schema  # noqa: F401
