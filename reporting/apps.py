from django.apps import AppConfig


class ReportingConfig(AppConfig):
    name = "reporting"
    verbose_name = "Reporting: the gateway's state, read from every app"
