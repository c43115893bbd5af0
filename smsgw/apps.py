from django.apps import AppConfig


class SmsgwConfig(AppConfig):
    name = "smsgw"
    verbose_name = "Tenants and API keys"
