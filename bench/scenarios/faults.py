"""``python -m bench faults``: the same burst twice in one run, on the same processes, first with a
fault-free sandbox and then with a share of requests timing out (nothing stored, the answer too late)
and a share accepted and then hung (stored, the answer too late). Prints both throughputs, lags, the
ratio faulty / fault-free, and what the sandbox saw; asserts nothing.

Throughput is the burst's: messages / (last `sent` - due moment). In the faulty run that includes the
recovery of every faulted message (a timed-out request is uncertain: the reconciler looks after
RECONCILE_FIRST_LOOK_SECONDS and proves absence a RECONCILE_ABSENT_GRACE_SECONDS later before it
resends), so a small run is dominated by those fixed waits. The result also gives the throughput of the
messages no fault touched, which says whether the faults slowed everything else down."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from bench.harness import data, figures, sampling, topology


def faults(
    *,
    n: int,
    timeout_share: float,
    hang_share: float,
    concurrency: int,
    lead_seconds: float,
    client_timeout: float,
    hang_seconds: float,
    timeout: float,
    first_look: int | None = None,
    absent_grace: int | None = None,
) -> dict:
    env = {
        # The client gives up after client_timeout; the sandbox answers after hang_seconds (later).
        "TWILIO_TIMEOUT_SECONDS": str(client_timeout),
        "SMSGW_SENDING_LEASE_SECONDS": str(max(5, int(client_timeout) + 4)),
        "SMSGW_QUEUED_RECOVERY_SECONDS": "10",
    }
    # The reconciler's waits bound how soon a faulted message can be sent; production values unless set.
    if first_look:
        env["SMSGW_RECONCILE_FIRST_LOOK_SECONDS"] = str(first_look)
    if absent_grace:
        env["SMSGW_RECONCILE_ABSENT_GRACE_SECONDS"] = str(absent_grace)
    topo = topology.Topology(latency_ms=0, send_concurrency=concurrency, env=env)
    try:
        # Unmeasured: fresh worker processes pay for first connections and imports, which would
        # otherwise count against whichever run came first.
        _run(topo, min(n, 1000), lead_seconds=2.0, timeout=timeout, label="warm-up", sandbox={})
        clean = _run(topo, n, lead_seconds=lead_seconds, timeout=timeout, label="fault-free", sandbox={})
        rules = {
            "timeout_rate": timeout_share,
            "accept_then_hang_rate": hang_share,
            "timeout_hang_seconds": hang_seconds,
        }
        faulty = _run(topo, n, lead_seconds=lead_seconds, timeout=timeout, label="faulty", sandbox=rules)
    finally:
        topo.stop()

    def ratio(key: str) -> float | None:
        a, b = faulty[key], clean[key]
        return round(a / b, 3) if a and b else None

    return {
        "scenario": "faults",
        "messages": n,
        "timeout_share": timeout_share,
        "accept_then_hang_share": hang_share,
        "client_timeout_s": client_timeout,
        "reconcile_env": {k: v for k, v in env.items() if k.startswith("SMSGW_RECONCILE")},
        "broker": topology.broker(),
        "fault_free": clean,
        "faulty": faulty,
        # Target (docs/benchmarks.md, "Faults and the send path"): >= 0.90.
        "ratio_faulty_to_fault_free": ratio("throughput_msg_s"),
        "ratio_unfaulted_messages": ratio("unfaulted_throughput_msg_s"),
    }


def _run(
    topo: topology.Topology, n: int, *, lead_seconds: float, timeout: float, label: str, sandbox: dict
) -> dict:
    tenant = data.bench_reset()
    with connection.cursor() as cur:
        cur.execute("DELETE FROM delivery_duplicatesubmission")
    # A clean store and counters, then this run's fault rates (none for the fault-free run).
    topo.sandbox.reset()
    if sandbox:
        topo.sandbox.config(**sandbox)
    due = timezone.now() + timedelta(seconds=lead_seconds)
    data.messages_load(tenant, n, first_due=due)
    with connection.cursor() as cur:
        cur.execute("ANALYZE scheduling_message")
    figures.say(f"faults ({label}): {n} messages due at {due.isoformat()}")
    with sampling.MemorySampler(topo.worker_pids()) as mem:
        sent = figures.wait_sent(n, lead_seconds + timeout)
        cpu = mem.cpu_seconds()
    stats = figures.percentiles("tenant_id = %s", [tenant.pk])
    span = (stats["last_sent"] - due).total_seconds() if stats["last_sent"] else None
    with connection.cursor() as cur:
        # A message is "faulted" when any of its attempts ended other than accepted.
        cur.execute(
            """SELECT count(*), max(m.sent_at) FROM scheduling_message m
               WHERE m.tenant_id = %s AND m.status = 'sent' AND NOT EXISTS (
                   SELECT 1 FROM delivery_attempt a WHERE a.message_id = m.id AND a.outcome <> 'accepted')""",
            [tenant.pk],
        )
        unfaulted, unfaulted_last = cur.fetchone()
        cur.execute("SELECT outcome, count(*) FROM delivery_attempt GROUP BY outcome")
        attempts = dict(cur.fetchall())
        cur.execute("SELECT count(*) FROM delivery_duplicatesubmission")
        (duplicate_rows,) = cur.fetchone()
        cur.execute(
            "SELECT status, count(*) FROM scheduling_message WHERE tenant_id = %s GROUP BY 1", [tenant.pk]
        )
        statuses = dict(cur.fetchall())
    unfaulted_span = (unfaulted_last - due).total_seconds() if unfaulted_last else None
    seen = topo.sandbox.stats()
    per_to = Counter(m["to"] for m in topo.sandbox.messages_json())
    send_cpu = sum(v for k, v in cpu.items() if k.startswith("sender"))
    return {
        "all_sent": sent >= n,
        "statuses": statuses,
        "due_to_last_sent_s": span,
        "throughput_msg_s": n / span if span else None,
        "lag_p50_s": stats["lag_p50_s"],
        "lag_p90_s": stats["lag_p90_s"],
        "lag_p99_s": stats["lag_p99_s"],
        "lag_max_s": stats["lag_max_s"],
        "sent_early": stats["sent_early"],
        "unfaulted_messages": unfaulted,
        "unfaulted_throughput_msg_s": unfaulted / unfaulted_span if unfaulted_span else None,
        "attempt_outcomes": attempts,
        "sandbox_requests": sum(seen["by_outcome"].values()),
        "sandbox_by_outcome": {k: v for k, v in seen["by_outcome"].items() if v},
        "sandbox_stored": seen["submissions"],
        # Stored more than once for one recipient (every bench message has its own): must be 0.
        "duplicates": sum(c - 1 for c in per_to.values() if c > 1),
        "duplicate_submission_rows": duplicate_rows,
        "send_worker_cpu_ms_per_message": round(1000 * send_cpu / max(1, n), 3),
    }
