"""What scheduling's acceptance port (scheduling.messages.acceptance) asks, answered by the suppression list
and the destination guards. Named by ``settings.ACCEPTANCE_CHECKS``."""

from delivery.guards.destinations import destination_refusals
from delivery.guards.suppression import is_suppressed, suppressed_numbers

__all__ = ["destination_refusals", "is_suppressed", "suppressed_numbers"]
