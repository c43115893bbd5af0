"""The integration harness (a plugin of every test run: the root conftest.py loads it): a provider's
sandbox, celery workers and beat as real processes, on the test database (PostgreSQL in CI) and the test
broker (Redis in CI).

It names no provider: a provider's sandbox, the environment the gateway needs to reach it and how its
submissions are counted come from its kit (``delivery.providers.kits``). ``pipeline`` sends through the
default provider (the registry's first); ``provider_pipeline(name)`` through any registered one, and a
provider package's own tests (``delivery/providers/<name>/tests/``) use it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from django.db import connection

from bench.harness.devprocs import BIN
from delivery.providers import DEFAULT_PROVIDER
from delivery.providers.kits import kit_module
from scheduling.models import Message, MessageEvent, Status
from smsgw.config import providers as declarations
from tests import processes

# Short windows so recovery paths run within a test's time, not production's minutes.
FAST = {
    "SMSGW_SWEEP_INTERVAL": "1",
    # The sweep and receipts loops poll every 0.1 s between passes that find no full batch, not production's
    # 0.05 s: a few statements per pass in every pipeline's worker, dozens of them side by side on two cores,
    # were CPU the other tests waited for. Every wait here is seconds long; 50 ms more per pass is in it.
    "SMSGW_IDLE_POLL_SECONDS": "0.1",
    "SMSGW_QUEUED_RECOVERY_SECONDS": "4",
    "SMSGW_SENDING_LEASE_SECONDS": "4",
    "SMSGW_RETRY_BASE_SECONDS": "0.2",
    "SMSGW_RECONCILE_FIRST_LOOK_SECONDS": "1",
    "SMSGW_RECONCILE_ABSENT_GRACE_SECONDS": "3",
    # The sandbox's list does not lag unless a test says so (list_lag_seconds); tests that make it lag set
    # the bound to match.
    "SMSGW_RECONCILE_LIST_LAG_SECONDS": "2",
    "SMSGW_THROTTLE_BASE_SECONDS": "0.2",
    "SMSGW_THROTTLE_MAX_DELAY_SECONDS": "2",
    "SMSGW_HOLD_PROBE_FIRST_SECONDS": "2",
    "SMSGW_HOLD_PROBE_MAX_SECONDS": "4",
    "SMSGW_HOLDS_PROBE_INTERVAL": "1",
    # Twilio's real per-sender defaults (1 segment/s for a long code) would make every test wait: set far
    # above what a test sends. Pacing tests set their own rates.
    "SMSGW_RATE_LONG_CODE": "100000",
    "SMSGW_RATE_TOLL_FREE": "100000",
    "SMSGW_RATE_SHORT_CODE": "100000",
    "SMSGW_RATE_ALPHANUMERIC": "100000",
    "SMSGW_RATE_MESSAGING_SERVICE": "100000",
    "SMSGW_ACCOUNT_RATE": "100000",
    # No API rate limit by default (a race test sends hundreds of requests from one key); the rate-limit
    # tests set a tenant's own limit.
    "SMSGW_API_RATE_PER_SECOND": "0",
}
# Every provider's request timeout (its package names the setting), short enough for a recovery path to
# run within a test: the sending lease above must stay longer.
REQUEST_TIMEOUT_SECONDS = "2"


def _request_timeouts() -> dict[str, str]:
    return {
        s.request_timeout_setting: REQUEST_TIMEOUT_SECONDS
        for s in declarations.all_settings()
        if s.request_timeout_setting
    }


def fast_env() -> dict[str, str]:
    """The harness's short windows and request timeouts, for a process started outside a pipeline."""
    return {**_request_timeouts(), **FAST}


def kit(provider: str) -> Any:
    """Provider ``provider``'s kit module; a test of a provider without one is a usage error."""
    module = kit_module(provider)
    if module is None:
        raise pytest.UsageError(f"provider {provider!r} has no kit (delivery/providers/<name>/kit.py)")
    return module


def sandbox_process(provider: str = DEFAULT_PROVIDER, **options: Any) -> Any:
    """Provider ``provider``'s sandbox as a separate process, not yet started (its kit's options)."""
    return kit(provider).sandbox_process(**options)


class Pipeline:
    """Workers, beats and web processes sending through ``sandbox``, provider ``provider``'s sandbox
    process (started): its kit says what the gateway needs to reach it."""

    def __init__(self, sandbox: Any, provider: str = DEFAULT_PROVIDER):
        self.sandbox = sandbox
        self.provider = provider
        self.kit = kit(provider)
        self.procs: list[processes.Proc] = []
        chosen = {} if provider == DEFAULT_PROVIDER else {"SMSGW_PROVIDER": provider}
        self.env = processes.process_env(**self.kit.gateway_env(sandbox), **fast_env(), **chosen)

    # Workers and beats start without waiting for each other: the next wait (wait_until, wait_all_final,
    # ready) first waits until every one started so far is ready, so a test's processes start together.
    def worker(self, name: str = "w1", **kw) -> processes.Proc:
        proc = processes.celery_worker(name, self.env, wait=False, **kw)
        self.procs.append(proc)
        return proc

    def beat(self, name: str = "b1") -> processes.Proc:
        proc = processes.celery_beat(name, self.env, wait=False)
        self.procs.append(proc)
        return proc

    def ready(self) -> None:
        """Every process started so far is ready (its log says so)."""
        for proc in self.procs:
            proc.ready()

    def submissions_by_recipient(self) -> Counter:
        """Submissions the sandbox stored, by recipient (E.164; a long message once)."""
        return self.kit.submitted_to(self.sandbox)

    def wait_until(self, predicate, timeout: float, what: str) -> None:
        self.ready()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.25)
        logs = "\n".join(f"--- {p.name}\n{p.log()[-3000:]}" for p in self.procs)
        counts = dict(Counter(Message.objects.values_list("status", flat=True)))
        # What the unfinished messages went through: the timeline of two of them.
        sample = list(Message.objects.exclude(status=Status.DELIVERED).order_by("id")[:2])
        timelines = "\n".join(
            f"{m.public_id} {m.status} {m.reason_code} {m.status_reason}: "
            + "; ".join(f"{e.kind} {e.details}"[:300] for e in MessageEvent.objects.filter(message=m))
            for m in sample
        )
        raise AssertionError(
            f"timed out waiting for {what}; statuses {counts}\n{logs}\n--- timelines\n{timelines}"
        )

    def wait_all_final(
        self,
        ids,
        timeout: float = 60,
        final=(
            Status.SENT,
            Status.DELIVERED,
            Status.UNDELIVERED,
            Status.CANCELLED,
            Status.FAILED,
            Status.EXPIRED,
        ),
    ) -> None:
        self.wait_until(
            lambda: Message.objects.filter(pk__in=ids).exclude(status__in=final).count() == 0,
            timeout,
            f"{len(ids)} messages to finish",
        )

    def stop(self) -> None:
        processes.stop_all(self.procs)


def handed_over(pks) -> Counter:
    """The messages' statuses with `delivered` counted as `sent`: a copy the reconciler finds at the
    provider is applied with the status it has there (delivery.sending.reconcile), so a message sent
    once may already be `delivered` when a test looks."""
    statuses = Message.objects.filter(pk__in=pks).values_list("status", flat=True)
    return Counter(Status.SENT if s == Status.DELIVERED else s for s in statuses)


def start_web(
    pipeline: Pipeline, *, web_only: dict[str, str] | None = None, workers: int = 2, **env: str
) -> str:
    """gunicorn on a free port, with SMSGW_PUBLIC_BASE_URL pointing at it so the sandbox's signed status
    callbacks reach the receipt endpoint and its inbound messages (``pipeline.sandbox.inbound(...)``) the
    gateway's ``/inbound/<provider>/``; ``env`` is added to the pipeline's environment first, and
    ``web_only`` to the web process's alone (e.g. its own DATABASE_URL). Returns the base URL."""
    port = processes.free_port()
    base = f"http://127.0.0.1:{port}"
    pipeline.env["SMSGW_PUBLIC_BASE_URL"] = base
    # the sandbox's inbound messages (POST /_sandbox/inbound) go to this gateway's incoming webhook, for
    # a sandbox built on the framework (sandbox.process: a provider package's own may have none)
    if callable(getattr(pipeline.sandbox, "inbound", None)):
        pipeline.sandbox.config(inbound_url=f"{base}/inbound/{pipeline.provider}/")
    pipeline.env.update(env)
    web = processes.Proc(
        "web",
        [
            str(BIN / "gunicorn"),
            "config.wsgi",
            "--config",
            "python:smsgw.runtime.gunicorn_conf",  # limits and JSON error pages
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--no-control-socket",  # gunicorn's default is one socket per host: tests run several
        ],
        {**pipeline.env, **(web_only or {})},
        ready_marker="Booting worker",
    )
    pipeline.procs.append(web)
    return base


@pytest.fixture
def provider_pipeline(transactional_db) -> Iterator[Callable[..., Pipeline]]:
    """``provider_pipeline(name, **sandbox_options)``: a pipeline through provider ``name``'s sandbox
    (started here, stopped with its processes at the test's end)."""
    processes.broker_purge()
    connection.close()  # workers are separate processes; do not hold a connection they could wait on
    with ExitStack() as stack:

        def make(provider: str = DEFAULT_PROVIDER, **options: Any) -> Pipeline:
            sandbox = stack.enter_context(sandbox_process(provider, **options))
            pipe = Pipeline(sandbox, provider)
            stack.callback(pipe.stop)
            return pipe

        try:
            yield make
        finally:
            stack.close()
            processes.broker_purge()


@pytest.fixture
def pipeline(provider_pipeline) -> Pipeline:
    """A pipeline through the default provider's sandbox."""
    return provider_pipeline()
