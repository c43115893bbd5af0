"""The release gates: one ordered list (scheduling.dispatch.release.RELEASE_GATES), resolved on first use."""

from __future__ import annotations

from delivery.flow import circuit, pacing
from delivery.guards import velocity
from scheduling.dispatch import release
from smsgw.limits import execution


def test_the_gates_and_their_order_are_pinned():
    # Velocity review first (it takes no capacity or quota from what goes), the quota last (it sees
    # exactly what is handed to the send queues).
    assert release.RELEASE_GATES == (
        "delivery.guards.velocity.velocity_gate",
        "delivery.flow.pacing.release_gate",
        "smsgw.limits.execution.quota_gate",
    )
    assert release.RELEASE_TICKS == (
        "delivery.flow.circuit.circuit_tick",
        "delivery.guards.velocity.counters_prune",
    )


def test_the_gates_resolve_to_the_functions_in_that_order(settings):
    settings.PACING_ENABLED = True
    assert release.release_gates() == [velocity.velocity_gate, pacing.release_gate, execution.quota_gate]
    assert [release._resolve(p) for p in release.RELEASE_TICKS] == [
        circuit.circuit_tick,
        velocity.counters_prune,
    ]


def test_pacing_off_releases_without_the_capacity_gate(settings):
    settings.PACING_ENABLED = False
    assert release.release_gates() == [velocity.velocity_gate, execution.quota_gate]
