from django.apps import AppConfig


class DeliveryConfig(AppConfig):
    name = "delivery"
    verbose_name = "Delivery: attempts and providers"

    def ready(self) -> None:
        # The sweep (scheduling) asks these gates which due messages may go: first the velocity guard
        # (held for review: it must not take capacity or quota from what goes), then capacity, fairness,
        # circuit; and gives the circuit breaker a tick per pass to send its probe.
        from django.conf import settings

        from delivery.circuit import circuit_tick
        from delivery.pacing import release_gate
        from delivery.velocity import counters_prune, velocity_gate
        from scheduling.release import release_gate_register, release_tick_register

        release_gate_register(velocity_gate)
        if settings.PACING_ENABLED:
            release_gate_register(release_gate)
        release_tick_register(circuit_tick)
        release_tick_register(counters_prune)
