"""``python -m bench burst | steady | pending`` (docs/running-benchmarks.md): messages due at one moment,
a steady rate of them, and the empty sweep over a million pending. They print figures and never assert.
They need PostgreSQL (DATABASE_URL) and a real broker (CELERY_BROKER_URL), and they start their own
sandbox, beat and workers as real processes, exactly as production runs them."""

from __future__ import annotations

import statistics
import time
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from bench.harness.data import bench_reset, messages_load
from bench.harness.figures import percentiles, say, sweep_summary, wait_sent
from bench.harness.sampling import MemorySampler
from bench.harness.topology import Topology, broker


def burst(
    *,
    n: int,
    latency_ms: int,
    concurrency: int,
    lead_seconds: float,
    timeout: float,
    baseline: bool = True,
    env: dict[str, str] | None = None,
) -> dict:
    """n messages due at one moment; then, unless ``baseline`` is off, the same number of Celery ETA
    no-op tasks due at once on the same broker (bench.scenarios.baseline), and the ratio of the two rates.
    ``env``: more environment for the processes (e.g. tracing on: bench.scenarios.tracing_cost)."""
    pool = "prefork"
    tenant = bench_reset()
    topo = Topology(latency_ms=latency_ms, send_concurrency=concurrency, pool=pool, env=env)
    try:
        due = timezone.now() + timedelta(seconds=lead_seconds)
        messages_load(tenant, n, first_due=due)
        with connection.cursor() as cur:
            cur.execute("ANALYZE scheduling_message")
        say(f"burst: {n} messages due at {due.isoformat()} (sandbox latency {latency_ms} ms)")
        with MemorySampler(topo.worker_pids()) as mem:
            sent = wait_sent(n, timeout)
            cpu = mem.cpu_seconds()
        stats = percentiles("tenant_id = %s", [tenant.pk])
        span = (stats["last_sent"] - due).total_seconds() if stats["last_sent"] else float("nan")
        send_cpu = sum(v for k, v in cpu.items() if k.startswith("sender"))
        result = {
            "scenario": "burst",
            "messages": n,
            "sandbox_latency_ms": latency_ms,
            "broker": broker(),
            "all_sent": sent >= n,
            "due_to_last_sent_s": span,
            "throughput_msg_s": n / span if span else None,
            **{k: v for k, v in stats.items() if k.startswith(("lag", "sent"))},
            "sandbox_submissions": topo.sandbox.stats()["submissions"],
            "sweep": sweep_summary(topo.sweep_passes()),
            "worker_peak_rss_mb_per_process": mem.peak_process_mb,
            "worker_peak_rss_mb_total": mem.peak_total_mb,
            "cpu_seconds": cpu,
            "send_worker_cpu_ms_per_message": round(1000 * send_cpu / max(1, stats["sent"]), 3),
        }
    finally:
        topo.stop()
    if baseline:
        from bench.scenarios.baseline import eta_noop

        base = eta_noop(
            n=n, concurrency=concurrency, pool=pool, lead_seconds=lead_seconds, timeout=timeout, env=topo.env
        )
        result["baseline_celery_eta_noop"] = base
        rate, base_rate = result["throughput_msg_s"], base["throughput_tasks_s"]
        # Target (docs/benchmarks.md): >= 1.5, the gateway drains a burst faster than bare ETA tasks run.
        result["ratio_gateway_to_baseline"] = round(rate / base_rate, 3) if rate and base_rate else None
    return result


def steady(*, rate: int, seconds: int, latency_ms: int, concurrency: int, timeout: float) -> dict:
    tenant = bench_reset()
    topo = Topology(latency_ms=latency_ms, send_concurrency=concurrency)
    try:
        n = rate * seconds
        due = timezone.now() + timedelta(seconds=5)
        messages_load(tenant, n, first_due=due, spread_seconds=seconds)
        say(f"steady: {rate}/s for {seconds}s ({n} messages) from {due.isoformat()}")
        with MemorySampler(topo.worker_pids()) as mem:
            sent = wait_sent(n, seconds + timeout)
        stats = percentiles("tenant_id = %s", [tenant.pk])
        return {
            "scenario": "steady",
            "rate_per_s": rate,
            "seconds": seconds,
            "broker": broker(),
            "all_sent": sent >= n,
            **{k: v for k, v in stats.items() if k.startswith(("lag", "sent"))},
            "sweep": sweep_summary(topo.sweep_passes()),
            "worker_peak_rss_mb_per_process": mem.peak_process_mb,
        }
    finally:
        topo.stop()


def pending(*, n: int, repeats: int, idle_seconds: int) -> dict:
    from scheduling.dispatch.sweep import sweep_once

    tenant = bench_reset()
    chunk = 250_000
    tomorrow = timezone.now() + timedelta(days=1)
    for start in range(0, n, chunk):
        messages_load(tenant, min(chunk, n - start), first_due=tomorrow, offset=start)
    with connection.cursor() as cur:
        cur.execute("ANALYZE scheduling_message")
    say(f"pending: {n} messages scheduled for {tomorrow.isoformat()}")
    sweep_once()  # warm caches and connection
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        report = sweep_once()
        times.append((time.perf_counter() - started) * 1000)
        assert report.total == 0
    topo = Topology(latency_ms=0, send_concurrency=2)
    try:
        with MemorySampler(topo.worker_pids()) as mem:
            time.sleep(idle_seconds)
    finally:
        topo.stop()
    times.sort()
    return {
        "scenario": "pending",
        "pending": n,
        "empty_sweep_ms_p50": statistics.median(times),
        "empty_sweep_ms_p99": times[int(len(times) * 0.99) - 1],
        "empty_sweep_ms_max": times[-1],
        "worker_peak_rss_mb_per_process": mem.peak_process_mb,
        "worker_peak_rss_mb_total": mem.peak_total_mb,
        "idle_seconds": idle_seconds,
    }
