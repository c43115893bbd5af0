"""Benchmarks for sending within provider and tenant limits (``python -m bench paced|adaptive|fairness|
outage|limiter``). Each starts its own sandbox (enforcing the limits like the provider), sweeper, send
workers and beat as real processes, prints figures and asserts nothing."""

from __future__ import annotations

import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from bench.harness import data, figures, sampling, topology
from delivery.models import AccountCapacity, ProviderCircuit, RateBucket, SenderCapacity
from delivery.providers.twilio.sandbox.process import DEFAULT_ACCOUNT_SID
from scheduling.messages import service as services
from scheduling.models import Message
from smsgw.domain_errors import ConflictError
from smsgw.models import Tenant

PROVIDER = "twilio"


def _sliding_max(times: list[float], window: float = 1.0) -> int:
    """The most events in any half-open window [t, t + window)."""
    return _sliding_max_at(times, window)[0]


def _sliding_max_at(times: list[float], window: float = 1.0) -> tuple[int, float]:
    """The most events in any window [t, t + window), and where that window starts."""
    best, at, start = 0, 0.0, 0
    for end, t in enumerate(times):
        while times[start] <= t - window:
            start += 1
        if end - start + 1 > best:
            best, at = end - start + 1, times[start]
    return best, at


def _tenant(slug: str) -> Tenant:
    tenant, _ = Tenant.objects.get_or_create(
        slug=slug, defaults={"name": slug, "default_from": "+14155550100", **data.UNLIMITED}
    )
    return tenant


def paced(
    *,
    n: int,
    senders: int,
    rate: float,
    queue_seconds: float,
    timeout: float,
    env: dict[str, str] | None = None,
    setup: Callable[[Tenant], None] | None = None,
    sandbox_realtime: bool = False,
) -> dict:
    """n messages due at one moment from ``senders`` From numbers; the sandbox sends ``rate`` segments/s
    per sender and refuses (21611) what overflows a queue of ``queue_seconds``. The gateway is told the
    same rates: nothing should be refused, no sender should go over its rate, and the account's whole
    capacity should be used. One paced message is cancelled while it waits. ``env``: extra environment
    of the worker processes; ``setup``: called with the bench tenant before the processes start (bench
    guards runs this scenario with and without the destination guards)."""
    tenant = data.bench_reset()
    if setup is not None:
        setup(tenant)
    account_rate = senders * rate
    for i in range(senders):
        SenderCapacity.objects.create(
            provider=PROVIDER,
            account=DEFAULT_ACCOUNT_SID,
            sender=data.sender_number(i),
            segments_per_second=rate,
        )
    AccountCapacity.objects.create(
        provider=PROVIDER, account=DEFAULT_ACCOUNT_SID, segments_per_second=account_rate
    )
    topo = topology.Topology(
        latency_ms=0,
        send_concurrency=3,
        env=env,
        sandbox_realtime=sandbox_realtime,
        sandbox_args=[
            "--sender-rate",
            str(rate),
            "--account-rate",
            str(account_rate),
            "--queue-max-seconds",
            str(queue_seconds),
        ],
    )
    try:
        due = timezone.now() + timedelta(seconds=15)
        data.messages_load(tenant, n, first_due=due, senders=senders)
        with connection.cursor() as cur:
            cur.execute("ANALYZE scheduling_message")
        figures.say(f"paced: {n} messages due at {due.isoformat()} from {senders} senders at {rate}/s each")
        cancelled = None
        deadline = time.monotonic() + timeout + 30
        cpu = sampling.MemorySampler(topo.worker_pids()).__enter__()
        while time.monotonic() < deadline:
            if cancelled is None and timezone.now() > due + timedelta(seconds=10):
                victim = (
                    Message.objects.filter(tenant=tenant, status="scheduled", reason_code="paced")
                    .order_by("-run_after")
                    .first()
                )
                if victim is not None:
                    try:
                        services.message_cancel(tenant=tenant, public_id=victim.public_id, actor="bench")
                    except ConflictError:  # released between the read and the cancel: pick another
                        continue
                    cancelled = (victim.to, victim.run_after)
            done = Message.objects.filter(tenant=tenant, status__in=["sent", "cancelled"]).count()
            if done >= n:
                break
            time.sleep(1.0)
        cpu_seconds = cpu.cpu_seconds()
        cpu.__exit__(None, None, None)
        stats = topo.sandbox.stats()
        rows = topo.sandbox.submissions(0)
        times = sorted(r[0] for r in rows)
        per_sender: dict[str, list[float]] = defaultdict(list)
        for created, sender, _segments, _to in rows:
            per_sender[sender].append(created)
        worst_by_sender = {k: _sliding_max_at(sorted(v)) for k, v in per_sender.items()}
        worst = max((w for w, _ in worst_by_sender.values()), default=0)
        over = sorted(
            (
                (w, round(at - due.timestamp(), 2), k)
                for k, (w, at) in worst_by_sender.items()
                if w > rate * 1.05
            ),
            reverse=True,
        )
        per_second = Counter(int(t - due.timestamp()) for t in times)
        # The same, by when each request left the worker (the attempt's requested_at): what the gateway
        # controls, apart from the network and the provider's own scheduling of its arrivals.
        sent_by_sender: dict[str, list[float]] = defaultdict(list)
        with connection.cursor() as cur:
            cur.execute(
                "SELECT m.from_number, (a.response->>'requested_at')::float8 FROM delivery_attempt a "
                "JOIN scheduling_message m ON m.id = a.message_id "
                "WHERE a.outcome = 'accepted' AND a.response ? 'requested_at'"
            )
            for sender, at in cur.fetchall():
                sent_by_sender[sender].append(at)
        worst_sent = max((_sliding_max(sorted(v)) for v in sent_by_sender.values()), default=0)
        slotting = _slotting(due.timestamp(), rate)
        drain = times[-1] - due.timestamp() if times else float("nan")
        cancelled_submitted = sum(1 for r in rows if cancelled and r[3] == cancelled[0])
        return {
            "scenario": "paced",
            "messages": n,
            "senders": senders,
            "sender_rate": rate,
            "account_rate": account_rate,
            "submitted": len(rows),
            "rejections": stats.get("rejections", {}),
            "drain_seconds": round(drain, 1),
            "capacity_used": round(len(rows) / (drain * account_rate), 3) if times else None,
            "max_per_sender_in_any_1s": worst,
            "max_over_limit": round(worst / rate - 1, 3),
            "senders_over_5pct": len(over),
            "max_per_sender_in_any_1s_as_sent": worst_sent,
            **slotting,
            "worst_windows_s_after_due": over[:5],
            "submitted_per_second_first_5_and_last_3": [per_second[i] for i in range(5)]
            + [per_second[i] for i in sorted(per_second)[-3:]],
            "sandbox_max_per_sender_in_any_1s": max(
                (s.get("max_submitted_in_any_1s", 0) for s in stats.get("senders", {}).values()), default=0
            ),
            "account_max_in_any_1s": _sliding_max(times),
            "cancelled_while_paced": bool(cancelled),
            "cancelled_expected_at": cancelled[1].isoformat() if cancelled else None,
            "cancelled_then_submitted": cancelled_submitted,
            "cpu_ms_per_message": {k: round(1000 * v / n, 3) for k, v in cpu_seconds.items()},
            "paced_events": _count_events("paced"),
            "late_batches": sum(p.log().count("paced batch reached the worker") for p in topo.senders),
            "late_wakeups": sum(p.log().count("paced requests woke up") for p in topo.senders),
            "sweep": figures.sweep_summary(topo.sweep_passes()),
        }
    finally:
        topo.stop()


def _slotting(due: float, rate: float) -> dict:
    """Where a sender's burst comes from: the slots the gateway gave (the attempt's ``slot``, Twilio
    adapter) or the request leaving after its slot (``requested_at`` - ``slot``). The worst 1-s window of
    one sender counted by slot, where it is, and the lateness of the requests."""
    by_sender: dict[str, list[float]] = defaultdict(list)
    late: list[float] = []
    with connection.cursor() as cur:
        cur.execute(
            "SELECT m.from_number, (a.response->>'slot')::float8, (a.response->>'requested_at')::float8, "
            "coalesce((a.response->>'reslots')::int, 0) "
            "FROM delivery_attempt a JOIN scheduling_message m ON m.id = a.message_id "
            "WHERE a.outcome = 'accepted' AND a.response ? 'slot'"
        )
        moved: Counter[int] = Counter()
        for sender, slot, requested, reslots in cur.fetchall():
            by_sender[sender].append(slot)
            late.append(requested - slot)
            moved[reslots] += 1
    if not late:
        return {}
    worst = {k: _sliding_max_at(sorted(v)) for k, v in by_sender.items()}
    top = sorted(((w, round(at - due, 2), k) for k, (w, at) in worst.items()), reverse=True)
    late.sort()

    def pct(p: float) -> float:
        return round(1000 * late[min(len(late) - 1, int(p * len(late)))], 1)

    return {
        "slotted_messages": len(late),
        "max_per_sender_in_any_1s_by_slot": top[0][0],
        "senders_over_5pct_by_slot": sum(1 for w, _, _ in top if w > rate * 1.05),
        "worst_slot_windows_s_after_due": top[:5],
        "request_after_slot_ms": {"p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99), "max": pct(1.0)},
        "requests_over_100ms_after_slot": sum(1 for x in late if x > 0.1),
        # Requests whose process woke up too late for their slot and took a new one (delivery.sending.late).
        "requests_reslotted_at_send": sum(n for k, n in moved.items() if k),
        "reslots_per_request": dict(sorted(moved.items())),
    }


def _count_events(kind: str) -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM scheduling_messageevent WHERE kind = %s", [kind])
        return cur.fetchone()[0]


def adaptive(*, senders: int, rate: float, real_rate: float, seconds: int, queue_seconds: float) -> dict:
    """The gateway believes each sender takes ``rate`` segments/s; the sandbox really sends
    ``real_rate`` and refuses what overflows ``queue_seconds`` of queue (21611). Backpressure must find the
    real rate: the share of refused submissions per 10-s window, and the accepted rate against the real
    limit."""
    tenant = data.bench_reset()
    for i in range(senders):
        SenderCapacity.objects.create(
            provider=PROVIDER,
            account=DEFAULT_ACCOUNT_SID,
            sender=data.sender_number(i),
            segments_per_second=rate,
        )
    topo = topology.Topology(
        latency_ms=0,
        send_concurrency=2,
        sandbox_args=["--sender-rate", str(real_rate), "--queue-max-seconds", str(queue_seconds)],
    )
    try:
        n = int(senders * real_rate * (seconds + 20))
        due = timezone.now() + timedelta(seconds=10)
        data.messages_load(tenant, n, first_due=due, senders=senders)
        figures.say(f"adaptive: {senders} senders configured {rate}/s, really {real_rate}/s, {seconds} s")
        samples = []
        while timezone.now() < due:
            time.sleep(0.2)
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            s = topo.sandbox.stats()
            samples.append(
                (time.monotonic() - start, s["submissions"], sum(s.get("rejections", {}).values()))
            )
            time.sleep(1.0)
        windows = []
        for i in range(0, len(samples) - 10, 10):
            t0, acc0, rej0 = samples[i]
            t1, acc1, rej1 = samples[i + 10]
            accepted, rejected = acc1 - acc0, rej1 - rej0
            windows.append(
                {
                    "from_s": round(t0),
                    "accepted_per_s": round(accepted / (t1 - t0), 1),
                    "rejected_share": round(rejected / max(1, accepted + rejected), 4),
                }
            )
        limit = senders * real_rate
        steady = [w for w in windows if w["from_s"] >= 10]
        return {
            "scenario": "adaptive",
            "senders": senders,
            "configured_rate": rate,
            "real_rate": real_rate,
            "real_limit_per_s": limit,
            "windows": windows,
            "rejected_share_after_10s_max": max((w["rejected_share"] for w in steady), default=None),
            "throughput_vs_real_limit_min": round(min(w["accepted_per_s"] for w in steady) / limit, 3)
            if steady
            else None,
            "throughput_vs_real_limit_mean": round(
                statistics.mean(w["accepted_per_s"] for w in steady) / limit, 3
            )
            if steady
            else None,
            "effective_rates_now": dict(
                RateBucket.objects.filter(kind="sender").values_list("key", "rate_effective")[:senders]
            ),
        }
    finally:
        topo.stop()


def fairness(
    *, a_messages: int, account_rate: float, stream_rate: float, seconds: int, timeout: float
) -> dict:
    """One account capped at ``account_rate``; tenant A has ``a_messages`` bulk messages due at once;
    tenant B sends ``stream_rate`` bulk messages/s for ``seconds``, and tenant A itself a transactional
    stream at the same rate. Reports B's and A's transactional lag (sent_at - due_at)."""
    data.bench_reset()
    AccountCapacity.objects.create(
        provider=PROVIDER, account=DEFAULT_ACCOUNT_SID, segments_per_second=account_rate
    )
    a, b = _tenant("bench"), _tenant("bench-b")
    topo = topology.Topology(
        latency_ms=0, send_concurrency=3, sandbox_args=["--account-rate", str(account_rate)]
    )
    try:
        due = timezone.now() + timedelta(seconds=15)
        stream = int(stream_rate * seconds)
        data.messages_load(a, a_messages, first_due=due, priority="bulk", senders=50)
        data.messages_load(
            b,
            stream,
            first_due=due + timedelta(seconds=5),
            spread_seconds=seconds,
            priority="bulk",
            offset=a_messages,
        )
        data.messages_load(
            a,
            stream,
            first_due=due + timedelta(seconds=5),
            spread_seconds=seconds,
            priority="transactional",
            offset=a_messages + stream,
        )
        with connection.cursor() as cur:
            cur.execute("ANALYZE scheduling_message")
        figures.say(
            f"fairness: A {a_messages} bulk due at once; B {stream_rate}/s bulk and A {stream_rate}/s tx"
        )
        deadline = time.monotonic() + seconds + timeout
        while time.monotonic() < deadline:
            waiting = Message.objects.filter(
                tenant__in=[a, b], status__in=["scheduled", "queued", "sending"]
            ).exclude(tenant=a, priority="bulk")
            if not waiting.exists():
                break
            time.sleep(1.0)
        b_stats = figures.percentiles("tenant_id = %s", [b.pk])
        tx_stats = figures.percentiles("tenant_id = %s AND priority = 'transactional'", [a.pk])
        a_sent = Message.objects.filter(tenant=a, priority="bulk", status="sent").count()
        span = (b_stats["last_sent"] - due).total_seconds() if b_stats["last_sent"] else None
        return {
            "scenario": "fairness",
            "account_rate": account_rate,
            "a_backlog": a_messages,
            "stream_rate": stream_rate,
            "seconds": seconds,
            "b_sent": b_stats["sent"],
            "b_lag_p50_s": b_stats["lag_p50_s"],
            "b_lag_p99_s": b_stats["lag_p99_s"],
            "b_lag_max_s": b_stats["lag_max_s"],
            "a_tx_sent": tx_stats["sent"],
            "a_tx_lag_p50_s": tx_stats["lag_p50_s"],
            "a_tx_lag_p99_s": tx_stats["lag_p99_s"],
            "a_tx_lag_max_s": tx_stats["lag_max_s"],
            "a_bulk_sent_meanwhile": a_sent,
            "a_bulk_rate_meanwhile": round(a_sent / span, 1) if span else None,
            "account_max_in_any_1s": _sliding_max(sorted(r[0] for r in topo.sandbox.submissions(0))),
        }
    finally:
        topo.stop()


def outage(*, n: int, outage_seconds: int, refuse_share: float, timeout: float) -> dict:
    """n messages due at once; once a quarter is sent, the sandbox answers 503 for part of
    ``outage_seconds`` and then refuses connections for the rest (``refuse_share``), then recovers. No
    message may fail or be sent twice; requests during the outage are counted; resumption is the time
    from recovery to the next accepted submission."""
    tenant = data.bench_reset()
    topo = topology.Topology(latency_ms=5, send_concurrency=3, control_port=0)
    try:
        due = timezone.now() + timedelta(seconds=10)
        data.messages_load(tenant, n, first_due=due, senders=20)
        figures.say(f"outage: {n} messages due at {due.isoformat()}; {outage_seconds} s outage mid-drain")
        while Message.objects.filter(tenant=tenant, status="sent").count() < n // 4:
            time.sleep(0.2)
        down_at = time.time()
        topo.sandbox.config(outage="503")
        refuse = outage_seconds * refuse_share
        series = []  # requests the sandbox answered 503, per second of the outage
        seen = 0
        while time.time() < down_at + outage_seconds - refuse:
            time.sleep(max(0.0, min(1.0, down_at + outage_seconds - refuse - time.time())))
            total = topo.sandbox.stats()["by_outcome"].get("outage_503", 0)
            series.append(total - seen)
            seen = total
        during_503 = seen
        refuse_at = time.time()
        if refuse:
            topo.sandbox.config(outage="refuse")
            time.sleep(refuse)
        up_at = time.time()
        opened = ProviderCircuit.objects.filter(provider=PROVIDER).values_list("opened_at", flat=True).first()
        topo.sandbox.config(outage="none")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not Message.objects.filter(
                tenant=tenant, status__in=["scheduled", "queued", "sending"]
            ).exists():
                break
            time.sleep(1.0)
        rows = topo.sandbox.submissions(0)
        per_to = Counter(r[3] for r in rows)
        after = sorted(r[0] for r in rows if r[0] >= up_at)
        with connection.cursor() as cur:
            # Requests our workers made while connections were refused (the sandbox cannot count them).
            cur.execute(
                "SELECT count(*) FROM delivery_attempt WHERE started_at >= to_timestamp(%s) "
                "AND started_at < to_timestamp(%s)",
                [refuse_at, up_at],
            )
            attempts_refused = cur.fetchone()[0]
            cur.execute("SELECT status, count(*) FROM scheduling_message GROUP BY status")
            final = dict(cur.fetchall())
            cur.execute("SELECT max(attempt_count) FROM scheduling_message")
            max_attempts = cur.fetchone()[0]
        return {
            "scenario": "outage",
            "messages": n,
            "outage_seconds": outage_seconds,
            "final_statuses": final,
            "failed": final.get("failed", 0),
            "duplicates": sum(c - 1 for c in per_to.values() if c > 1),
            "requests_during_503": during_503,
            "requests_during_503_per_s": round(during_503 / (refuse_at - down_at), 2),
            "requests_during_503_by_second": series,
            "circuit_opened_after_s": round(opened.timestamp() - down_at, 3) if opened else None,
            "requests_during_503_after_first_5s_per_s": round(sum(series[5:]) / max(1, len(series[5:])), 2),
            "requests_while_refused": attempts_refused,
            "requests_while_refused_per_s": round(attempts_refused / refuse, 2) if refuse else None,
            "resumed_after_s": round(after[0] - up_at, 2) if after else None,
            "max_attempts_charged": max_attempts,
            "unavailable_events": _count_events("provider_unavailable"),
        }
    finally:
        topo.stop()


def limiter(*, n: int, timeout: float) -> dict:
    """The 50,000 burst twice in one run: with pacing off (the baseline) and on with limits far above
    what the machine can do. Reports both rates, their ratio and the limiter's CPU per message (the
    sweeper's CPU, both runs)."""
    out = {"scenario": "limiter", "messages": n}
    for label, env in (("baseline_pacing_off", {"SMSGW_PACING": "0"}), ("pacing_on", {})):
        tenant = data.bench_reset()
        topo = topology.Topology(latency_ms=0, send_concurrency=3, env=env)
        try:
            due = timezone.now() + timedelta(seconds=20)
            data.messages_load(tenant, n, first_due=due)
            with connection.cursor() as cur:
                cur.execute("ANALYZE scheduling_message")
            with sampling.MemorySampler(topo.worker_pids()) as mem:
                figures.wait_sent(n, timeout)
                cpu = mem.cpu_seconds()
            stats = figures.percentiles("tenant_id = %s", [tenant.pk])
            span = (stats["last_sent"] - due).total_seconds()
            out[label] = {
                "throughput_msg_s": round(n / span, 1),
                "lag_p99_s": stats["lag_p99_s"],
                "sweeper_cpu_ms_per_msg": round(1000 * cpu.get("sweeper", 0.0) / n, 4),
                "sender_cpu_ms_per_msg": round(1000 * cpu.get("sender0", 0.0) / n, 4),
                "postgres_cpu_ms_per_msg": round(1000 * cpu.get("postgres", 0.0) / n, 4),
            }
        finally:
            topo.stop()
    base, on = out["baseline_pacing_off"], out["pacing_on"]
    out["throughput_ratio_on_vs_off"] = round(on["throughput_msg_s"] / base["throughput_msg_s"], 3)
    out["limiter_cpu_ms_per_msg"] = round(
        on["sweeper_cpu_ms_per_msg"]
        - base["sweeper_cpu_ms_per_msg"]
        + on["postgres_cpu_ms_per_msg"]
        - base["postgres_cpu_ms_per_msg"],
        4,
    )
    return out
