"""The stages' hand-offs: the composition root (config.wiring) fills each slot of smsgw.stages once, by
reference; the release gates and the sweep's ticks in their order."""

from __future__ import annotations

from delivery import tasks as delivery_tasks
from delivery.flow import circuit, pacing
from delivery.guards import acceptance as delivery_acceptance
from delivery.guards import velocity
from delivery.routing import birth as routing_birth
from receipts import ingest, webhooks
from retention import redact, requested
from scheduling.dispatch import release
from scheduling.limits import execution
from scheduling.messages import acceptance
from smsgw import stages


def test_the_gates_and_their_order_are_pinned(settings):
    # Velocity review first (it takes no capacity or quota from what goes), the quota last (it sees
    # exactly what is handed to the send queues); pacing is the one a setting turns off.
    assert stages.release_gates() == (
        stages.ReleaseGate(velocity.velocity_gate),
        stages.ReleaseGate(pacing.release_gate, switch="PACING_ENABLED"),
        stages.ReleaseGate(execution.quota_gate),
    )
    assert stages.release_ticks() == (circuit.circuit_tick, velocity.counters_prune)
    settings.PACING_ENABLED = True
    assert release.release_gates() == [velocity.velocity_gate, pacing.release_gate, execution.quota_gate]


def test_pacing_off_releases_without_the_capacity_gate(settings):
    settings.PACING_ENABLED = False
    assert release.release_gates() == [velocity.velocity_gate, execution.quota_gate]


def test_every_other_hand_off_is_filled_with_its_stage(settings):
    assert stages.router() is routing_birth.rows_route
    assert stages.acceptance_checks() is delivery_acceptance
    assert acceptance._checks() is delivery_acceptance
    # The retention room's listener last: it masks what the outbox wrote for the same change.
    assert stages.status_listeners() == (
        webhooks.webhook_outbox_enqueue,
        execution.quota_release_listener,
        requested.retention_requested_apply,
    )
    assert stages.receipt_intake() is ingest.receipt_ingest
    assert stages.park_rows() is release.park_rows
    assert stages.publish_after_commit() is release.publish_after_commit
    assert stages.send_batch() is delivery_tasks.send_batch
    assert stages.reconcile_batch() is delivery_tasks.reconcile_batch
    assert stages.message_redact() is redact.message_redact_slot


def test_an_empty_slot_names_itself():
    import pytest
    from django.core.exceptions import ImproperlyConfigured

    slot: stages.Slot[int] = stages.Slot("example")
    with pytest.raises(ImproperlyConfigured, match="'example'"):
        slot()
    slot.fill(3)
    assert slot() == 3
