"""The inbound processor's pass, for tests outside tests/inbound (a provider package's own tests may not
import the inbound app: pyproject's import contracts)."""

from __future__ import annotations


def inbound_processed() -> int:
    """Work out every stored inbound message now due (inbound.process): how many were taken."""
    from inbound.process import inbound_process_due

    return inbound_process_due()


def inbound_states() -> list[str]:
    """The state of every stored inbound message, oldest first."""
    from inbound.models import InboundMessage

    return list(InboundMessage.objects.order_by("id").values_list("state", flat=True))
