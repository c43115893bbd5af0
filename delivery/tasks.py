"""Thin Celery entry points: load by id, call a service, nothing else."""

from __future__ import annotations

from celery import shared_task

from delivery import circuit, holds, reconcile, sending


@shared_task(name="delivery.send_batch", ignore_result=True)
def send_batch(message_ids: list[int], provider: str | None = None) -> None:
    sending.send_batch(message_ids, provider=provider)


@shared_task(name="delivery.reconcile_batch", ignore_result=True)
def reconcile_batch(message_ids: list[int]) -> None:
    for message_id in message_ids:
        reconcile.message_reconcile(message_id)


@shared_task(name="delivery.holds_probe", ignore_result=True)
def holds_probe() -> None:
    holds.holds_probe_due()


@shared_task(name="delivery.circuit_probe", ignore_result=True)
def circuit_probe() -> None:
    circuit.circuit_probe_account()
