from django.apps import AppConfig


class DeliveryConfig(AppConfig):
    name = "delivery"
    verbose_name = "Delivery: attempts and providers"
    # The sweep's release gates and per-pass ticks (velocity, pacing, circuit), the router and the checks
    # at acceptance are handed to scheduling by the composition root (config.wiring).
