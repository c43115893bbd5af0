"""The composition root's one job besides the settings: fill the stages' hand-off slots (smsgw.stages).

Run once, when Django is ready (config.apps). Every hand-off from one stage to a later one is here, by
reference, in one place: the release gates in their order, the sweep's ticks, the router a birth asks,
the checks at acceptance, the listeners told of every status change, the receipt intake, and scheduling's
park and publish for the stages after it.
"""

from __future__ import annotations

from smsgw import stages


def stages_install() -> None:
    from delivery import tasks as delivery_tasks
    from delivery.flow import circuit, pacing
    from delivery.guards import acceptance, velocity
    from delivery.routing import birth
    from inbound import facade_forward
    from receipts import ingest, webhooks
    from retention import reader, redact, requested
    from scheduling.dispatch import release
    from scheduling.limits import execution

    # "May this message go now?": after the sweep's own steps (claimed; the campaign's and the tenant's
    # state; quiet hours), these gates, in this order, each given what the one before released.
    stages.release_gates.fill(
        (
            # The velocity guard (held for review): first, so it takes no capacity or quota from what goes.
            stages.ReleaseGate(velocity.velocity_gate),
            # Capacity, fairness and the circuit breaker, per provider account (pacing slots). SMSGW_PACING=0
            # turns it off and releases every due message at once (to measure what pacing costs).
            stages.ReleaseGate(pacing.release_gate, switch="PACING_ENABLED"),
            # The tenant's daily quota: last, it sees exactly the messages about to be handed to the send
            # queues.
            stages.ReleaseGate(execution.quota_gate),
        )
    )
    # Once per sweep pass, in this order (database work only): the circuit breaker's probe, the velocity
    # counters' prune.
    stages.release_ticks.fill((circuit.circuit_tick, velocity.counters_prune))
    # Each new message's route (provider, sender, the legs to fail over to).
    stages.router.fill(birth.rows_route)
    # At acceptance: the suppression list and the destination guards.
    stages.acceptance_checks.fill(acceptance)
    # Inside the transaction of every status change: the tenant-webhook outbox (the notification commits
    # or rolls back with the change it reports), the quota's give-back for a message that ends before
    # it was submitted, and a message's own ContentRetention / AddressRetention (after the outbox, so the
    # notification of that very change is masked too).
    stages.status_listeners.fill(
        (
            webhooks.webhook_outbox_enqueue,
            execution.quota_release_listener,
            requested.retention_requested_apply,
        )
    )
    # A provider's word on a message, from a callback or from the reconciler's look-up alike.
    stages.receipt_intake.fill(ingest.receipt_ingest)
    # Scheduling's side of a wait and a release, for the send worker, pacing and the circuit.
    stages.park_rows.fill(release.park_rows)
    stages.publish_after_commit.fill(release.publish_after_commit)
    # The send worker's and the reconciler's tasks, which the sweep publishes.
    stages.send_batch.fill(delivery_tasks.send_batch)
    stages.reconcile_batch.fill(delivery_tasks.reconcile_batch)
    # The tenant APIs' reads of finished messages that moved to history (retention.reader).
    stages.message_history.fill(reader)
    # A message's content removed on request (the Twilio-compatible Body=""), by the retention room.
    stages.message_redact.fill(redact.message_redact_slot)
    # A callback URL set through another API than receipts' (the Twilio-compatible SmsUrl): the outbox's
    # SSRF check, at once (and again at each delivery).
    stages.url_check.fill(webhooks.webhook_url_check)
    # A Twilio program's TwiML answer to a forwarded incoming message: its <Message>s sent as replies.
    stages.webhook_answer.fill(facade_forward.twiml_answer)
