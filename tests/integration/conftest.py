"""Integration fixtures: the sandbox provider, celery workers and beat as real processes, on the test
database (PostgreSQL in CI) and the test broker (Redis in CI)."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from django.db import connection

from bench.harness.devprocs import BIN
from sandbox.vonage.process import VonageSandboxProcess
from scheduling.models import Message, Status
from tests import processes
from tests.sandbox_process import SandboxProcess

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
    "TWILIO_TIMEOUT_SECONDS": "2",
    "VONAGE_TIMEOUT_SECONDS": "2",
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


class Pipeline:
    def __init__(self, sandbox: SandboxProcess):
        self.sandbox = sandbox
        self.procs: list[processes.Proc] = []
        self.env = processes.process_env(
            TWILIO_API_BASE_URL=sandbox.base_url,
            TWILIO_ACCOUNT_SID=sandbox.account_sid,
            TWILIO_AUTH_TOKEN=sandbox.auth_token,
            **FAST,
        )

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
        return Counter(m.to for m in self.sandbox.list_messages())

    def wait_until(self, predicate, timeout: float, what: str) -> None:
        self.ready()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.25)
        logs = "\n".join(f"--- {p.name}\n{p.log()[-3000:]}" for p in self.procs)
        counts = dict(Counter(Message.objects.values_list("status", flat=True)))
        raise AssertionError(f"timed out waiting for {what}; statuses {counts}\n{logs}")

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


# The signature secret both sides share in the Vonage pipeline: the sandbox signs its receipts (and checks
# our signed requests) with it, the gateway checks every receipt's ``sig`` (VONAGE_SIGNATURE_SECRET).
VONAGE_SIGNATURE_SECRET = "integration-signature-secret"
VONAGE_SIGNATURE_METHOD = "sha256"


class VonagePipeline(Pipeline):
    """The same processes, sending through the Vonage sandbox (SMSGW_PROVIDER=vonage): a real HTTPS
    server with its own throwaway CA, requests and receipts signed with a shared secret."""

    def __init__(self, vonage: VonageSandboxProcess):
        self.sandbox = vonage  # type: ignore[assignment]
        self.vonage = vonage
        self.procs = []
        self.env = processes.process_env(
            SMSGW_PROVIDER="vonage",
            VONAGE_REST_HOST=vonage.rest_host,
            VONAGE_CA_BUNDLE=vonage.ca_file,
            VONAGE_API_KEY=vonage.api_key,
            VONAGE_API_SECRET=vonage.api_secret,
            VONAGE_SIGNATURE_SECRET=VONAGE_SIGNATURE_SECRET,
            VONAGE_SIGNATURE_METHOD=VONAGE_SIGNATURE_METHOD,
            **FAST,
        )

    def wait_until(self, predicate, timeout: float, what: str) -> None:
        try:
            super().wait_until(predicate, timeout, what)
        except AssertionError as exc:
            # What the messages went through, for the failure: the timeline of two of them.
            from scheduling.models import MessageEvent

            sample = list(Message.objects.exclude(status=Status.DELIVERED).order_by("id")[:2])
            timelines = "\n".join(
                f"{m.public_id} {m.status} {m.reason_code} {m.status_reason}: "
                + "; ".join(f"{e.kind} {e.details}"[:300] for e in MessageEvent.objects.filter(message=m))
                for m in sample
            )
            raise AssertionError(f"{exc}\n--- timelines\n{timelines}") from None

    def parts_by_client_ref(self) -> Counter:
        """Parts stored at the sandbox, by the client-ref each submission carried."""
        return Counter(p["client-ref"] for p in self.vonage.messages())

    def submissions_by_recipient(self) -> Counter:
        """Submissions (requests stored, a long message once) by recipient, as the sandbox holds them."""
        return Counter(f"+{p['to']}" for p in self.vonage.messages() if p["part"] == 1)


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
    callbacks reach the receipt endpoint; ``env`` is added to the pipeline's environment first, and
    ``web_only`` to the web process's alone (e.g. its own DATABASE_URL). Returns the base URL."""
    port = processes.free_port()
    base = f"http://127.0.0.1:{port}"
    pipeline.env["SMSGW_PUBLIC_BASE_URL"] = base
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
def pipeline(transactional_db):
    processes.broker_purge()
    connection.close()  # workers are separate processes; do not hold a connection they could wait on
    with SandboxProcess() as sandbox:
        pipe = Pipeline(sandbox)
        try:
            yield pipe
        finally:
            pipe.stop()
            processes.broker_purge()


@pytest.fixture
def vonage_pipeline(transactional_db):
    """Workers and beat sending through the Vonage sandbox; receipts need ``start_web`` (a test's own
    choice, as for Twilio)."""
    processes.broker_purge()
    connection.close()
    extra = ["--signature-secret", VONAGE_SIGNATURE_SECRET, "--signature-method", VONAGE_SIGNATURE_METHOD]
    with VonageSandboxProcess(extra_args=extra) as vonage:
        pipe = VonagePipeline(vonage)
        try:
            yield pipe
        finally:
            pipe.stop()
            processes.broker_purge()
