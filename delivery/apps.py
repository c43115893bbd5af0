from django.apps import AppConfig


class DeliveryConfig(AppConfig):
    name = "delivery"
    verbose_name = "Delivery: attempts and providers"
    # The sweep's release gates and per-pass ticks (velocity, pacing, circuit) are listed, in their
    # order, in scheduling.dispatch.release.RELEASE_GATES and RELEASE_TICKS.
