"""What scheduling's acceptance port (scheduling.messages.acceptance) asks, answered by the suppression list
and the destination guards. Handed to scheduling by the composition root (config.wiring)."""

from delivery.guards.destinations import destination_refusals
from delivery.guards.suppression import is_suppressed, suppressed_numbers

__all__ = ["destination_refusals", "is_suppressed", "suppressed_numbers"]
