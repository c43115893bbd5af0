"""Thin Celery entry points: load by id, call a service, nothing else."""

from __future__ import annotations

from celery import shared_task
from celery.signals import worker_init, worker_process_init, worker_process_shutdown

from delivery.flow import circuit
from delivery.flow import provider_holds as holds
from delivery.sending import inflight, reconcile
from delivery.sending import worker as sending
from smsgw import tracing
from smsgw.runtime.task_limits import next_tick_goes_on
from smsgw.tracing.tasks import task_traceparent


@shared_task(name="delivery.send_batch", ignore_result=True, bind=True)
def send_batch(
    self, message_ids: list[int], provider: str | None = None, not_before: list[float] | None = None
) -> None:
    # Returns once the batch is claimed and its submissions started; answers are recorded as they come
    # (delivery.sending.inflight), so a slow request never holds this worker slot. The span continues the
    # sweep pass that published it (its `traceparent` header) and links to each message's trace.
    with tracing.span(
        "send batch",
        kind=tracing.SpanKind.CONSUMER,
        parent=task_traceparent(self.request),
        attributes={"smsgw.provider": provider or "", "smsgw.batch.size": len(message_ids)},
    ):
        sending.send_batch(message_ids, provider=provider, not_before=not_before, wait=False)


@worker_init.connect
def _preload_providers(**_kwargs) -> None:
    """In the worker's parent, before the pool forks: import the provider SDKs (a child importing the
    provider SDK on its first task spent a second or more on it while that batch's slots went by)."""
    import gc

    from delivery.providers import providers_preload

    providers_preload()
    # Everything imported so far is shared with the pool children copy-on-write: kept out of their
    # garbage collector's passes, its pages stay shared instead of being copied into each child (Python
    # docs, gc.freeze: "to avoid copy-on-write of memory pages after fork").
    gc.freeze()


@worker_process_init.connect
def _warm_providers(**_kwargs) -> None:
    """In each pool child: start the adapters' event loops and pools before the first batch."""
    import sys

    from delivery.providers import providers_warm

    # The GIL switch interval is shortened only while paced submissions wait for their slots
    # (delivery.sending.inflight): there it keeps the event loop on time; otherwise it costs CPU for nothing.
    inflight.switch_interval_default(sys.getswitchinterval())

    providers_warm()


@worker_process_shutdown.connect
def _land_in_flight(**_kwargs) -> None:
    """A graceful stop: let what this process has in flight be answered and recorded first."""
    from django.conf import settings

    inflight.drain(timeout=float(settings.PROVIDER_REQUEST_TIMEOUT_SECONDS) + 5.0)


@shared_task(name="delivery.reconcile_batch", ignore_result=True)
def reconcile_batch(message_ids: list[int]) -> None:
    reconcile.reconcile_many(message_ids)


@shared_task(name="delivery.holds_probe", ignore_result=True)
@next_tick_goes_on
def holds_probe() -> None:
    holds.holds_probe_due()


@shared_task(name="delivery.circuit_probe", ignore_result=True)
@next_tick_goes_on
def circuit_probe() -> None:
    circuit.circuit_probe_account()
