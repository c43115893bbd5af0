"""``python -m bench broker-restart`` (docs/benchmarks.md, "Long runs and broker faults"): N messages due at
once drained twice in one run on the same processes, with a private redis-server as the broker: first
fault-free, then with that Redis killed (SIGKILL) when about 30% are sent and started again, empty, after
``down_seconds``. The workers and beat reconnect by themselves; the sweep notices the lost tasks
(scheduling.dispatch.recovery: the epoch key vanished, or a send queue is empty while rows wait) and
re-publishes them. Production recovery settings throughout. Prints both drain times, the excess of the faulty
one, the ``republished`` timeline entries by reason, what the sandbox stored (each recipient once) and the
WARNING/ERROR lines the workers and beat wrote from the kill to the end of the drain; asserts nothing.

Target (docs/benchmarks.md): drain completes ≤ 30 s after the restart beyond the fault-free drain time, i.e.
faulty - fault-free - down time ≤ 30 s."""

from __future__ import annotations

import re
import time
from collections import Counter
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from bench.harness import data, devprocs, figures, topology

TARGET_EXCESS_SECONDS = 30.0
# celery's log format: "[2026-12-01 11:40:02,546: WARNING/MainProcess] message"
LOG_LINE = re.compile(r"^\[[^\]]*?: (WARNING|ERROR|CRITICAL)/([^\]]+)\] (.*)$")


def _statuses(tenant_id: int) -> dict:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT status, count(*) FROM scheduling_message WHERE tenant_id = %s GROUP BY 1", [tenant_id]
        )
        return dict(cur.fetchall())


def _republished() -> dict:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT coalesce(details->>'reason', ''), count(*) FROM scheduling_messageevent "
            "WHERE kind = 'republished' GROUP BY 1"
        )
        reasons = dict(cur.fetchall())
    return {"entries": sum(reasons.values()), "reasons": reasons}


def _log_noise(logs: dict[str, str]) -> dict:
    """WARNING/ERROR lines per process, counted per distinct message (digits folded, so "3 messages"
    and "7 messages" are one message)."""
    out = {}
    for name, text in logs.items():
        counts: Counter = Counter()
        for line in text.splitlines():
            m = LOG_LINE.match(line)
            if m:
                counts[f"{m.group(1)} {re.sub(r'[0-9]+', 'N', m.group(3))[:200]}"] += 1
        out[name] = {"lines": sum(counts.values()), "by_message": dict(counts.most_common(20))}
    return out


def _drain(
    topo: topology.Topology, n: int, *, lead_seconds: float, timeout: float, label: str, fault=None
) -> dict:
    tenant = data.bench_reset()
    topo.sandbox.reset()
    due = timezone.now() + timedelta(seconds=lead_seconds)
    data.messages_load(tenant, n, first_due=due)
    with connection.cursor() as cur:
        cur.execute("ANALYZE scheduling_message")
    figures.say(f"broker-restart ({label}): {n} messages due at {due.isoformat()}")
    extra = fault(tenant) if fault else {}
    sent = figures.wait_sent(n, lead_seconds + timeout)
    stats = figures.percentiles("tenant_id = %s", [tenant.pk])
    span = (stats["last_sent"] - due).total_seconds() if stats["last_sent"] else None
    seen = topo.sandbox.stats()
    per_to = Counter(m["to"] for m in topo.sandbox.messages_json())
    result = {
        "all_sent": sent >= n,
        "statuses": _statuses(tenant.pk),
        "drain_s": round(span, 2) if span else None,
        "throughput_msg_s": round(n / span, 1) if span else None,
        "lag_p50_s": stats["lag_p50_s"],
        "lag_p99_s": stats["lag_p99_s"],
        "sent_early": stats["sent_early"],
        "republished": _republished(),
        "sandbox_submissions": seen["submissions"],
        "distinct_recipients_submitted": len(per_to),
        # Stored more than once for one recipient (every bench message has its own): must be 0.
        "duplicates": sum(c - 1 for c in per_to.values() if c > 1),
    }
    if extra:
        restarted = extra.pop("restarted_at")
        last = stats["last_sent"]
        result["restart_to_last_sent_s"] = round((last - restarted).total_seconds(), 2) if last else None
        result.update(extra)
    return result


def broker_restart(
    *,
    n: int,
    down_seconds: float,
    kill_at: float,
    concurrency: int,
    latency_ms: int,
    lead_seconds: float,
    timeout: float,
) -> dict:
    redis_server = devprocs.RedisServer()
    redis_server.start()
    topo = None
    try:
        topo = topology.Topology(
            latency_ms=latency_ms, send_concurrency=concurrency, env={"CELERY_BROKER_URL": redis_server.url}
        )
        procs = [topo.sweeper, *topo.senders, topo.beat]
        log_offsets: dict[str, int] = {}

        def kill_and_restart(tenant) -> dict:
            threshold = int(n * kill_at)
            deadline = time.monotonic() + lead_seconds + timeout
            while time.monotonic() < deadline:
                with connection.cursor() as cur:
                    cur.execute(
                        "SELECT count(*) FROM scheduling_message WHERE tenant_id = %s AND status = 'sent'",
                        [tenant.pk],
                    )
                    if cur.fetchone()[0] >= threshold:
                        break
                time.sleep(0.05)
            offsets = {p.name: len(p.log()) for p in procs}
            redis_server.kill9()
            killed_at = timezone.now()
            at_kill = _statuses(tenant.pk)
            figures.say(f"broker-restart: Redis killed at {killed_at.isoformat()}: {at_kill}")
            time.sleep(down_seconds)
            redis_server.start()
            restarted_at = timezone.now()
            figures.say(f"broker-restart: Redis started again, empty, at {restarted_at.isoformat()}")
            log_offsets.update(offsets)  # read after the drain: the log lines from the kill until then
            return {
                "restarted_at": restarted_at,
                "down_s": round((restarted_at - killed_at).total_seconds(), 2),
                "statuses_at_kill": at_kill,
                "queued_at_kill": at_kill.get("queued", 0),
            }

        # Unmeasured: fresh processes pay for first connections and imports.
        _drain(topo, min(n, 1000), lead_seconds=2.0, timeout=timeout, label="warm-up")
        clean = _drain(topo, n, lead_seconds=lead_seconds, timeout=timeout, label="fault-free")
        faulty = _drain(
            topo, n, lead_seconds=lead_seconds, timeout=timeout, label="Redis restart", fault=kill_and_restart
        )
        logs = {p.name: p.log()[log_offsets[p.name] :] for p in procs}
    finally:
        if topo is not None:
            topo.stop()
        redis_server.stop()
    excess = None
    if clean["drain_s"] and faulty["drain_s"]:
        excess = round(faulty["drain_s"] - clean["drain_s"] - faulty["down_s"], 2)
    return {
        "scenario": "broker-restart",
        "messages": n,
        "broker": "redis (private redis-server, no persistence)",
        "kill_at_share_sent": kill_at,
        "down_seconds": down_seconds,
        "fault_free": clean,
        "faulty": faulty,
        "fault_free_drain_s": clean["drain_s"],
        "faulty_drain_s": faulty["drain_s"],
        "restart_to_last_sent_s": faulty.get("restart_to_last_sent_s"),
        "excess_s": excess,
        "excess_within_target": excess is not None and excess <= TARGET_EXCESS_SECONDS,
        "target_excess_s": TARGET_EXCESS_SECONDS,
        "log_lines_warning_error_from_kill_to_drained": _log_noise(logs),
    }
