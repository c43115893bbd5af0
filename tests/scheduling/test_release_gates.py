"""The release gates: one ordered list (scheduling.release.RELEASE_GATES), resolved on first use."""

from __future__ import annotations

from delivery import circuit, pacing, velocity
from scheduling import release
from smsgw.limits import execution


def test_the_gates_and_their_order_are_pinned():
    # Velocity review first (it takes no capacity or quota from what goes), the quota last (it sees
    # exactly what is handed to the send queues).
    assert release.RELEASE_GATES == (
        "delivery.velocity.velocity_gate",
        "delivery.pacing.release_gate",
        "smsgw.limits.execution.quota_gate",
    )
    assert release.RELEASE_TICKS == ("delivery.circuit.circuit_tick", "delivery.velocity.counters_prune")


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
