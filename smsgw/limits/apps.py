from django.apps import AppConfig


class LimitsConfig(AppConfig):
    name = "smsgw.limits"
    label = "limits"
    verbose_name = "Tenant limits: quotas and API rate limits"

    def ready(self) -> None:
        # The quota gate runs after the delivery app's capacity gate (INSTALLED_APPS order): it sees
        # exactly the messages about to be handed to the send queues. The listener gives back the
        # booking of a message that ends before it was submitted.
        from scheduling.release import release_gate_register
        from scheduling.transitions import status_listener_register
        from smsgw.limits.execution import quota_gate, quota_release_listener

        release_gate_register(quota_gate)
        status_listener_register(quota_release_listener)
