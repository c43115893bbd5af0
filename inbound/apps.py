from django.apps import AppConfig


class InboundConfig(AppConfig):
    name = "inbound"
    verbose_name = "Inbound: replies, keywords, conversations"
