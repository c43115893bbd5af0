"""Routing: which (provider, account, sender) a message goes through, and in which order the others are
tried when one provably did not take it (delivery.routing.rules: the plan; delivery.routing.failover: the
move to the next leg)."""
