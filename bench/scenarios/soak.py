"""``python -m bench soak`` (docs/benchmarks.md, memory creep): a steady load for many minutes on real
processes (sandbox, sweeper, beat, send workers; with receipts, gunicorn and a receipts worker too, the
sandbox posting its status callbacks to it), the resident memory of every process sampled each minute,
pool child PIDs recorded every few seconds (a child replaced past CELERY_WORKER_MAX_MEMORY_PER_CHILD
shows as a new PID), and the lag per window. Prints per-minute samples and a summary; asserts nothing.

With ``trace_memory`` the send workers run with tracemalloc (bench.harness.tracemem, loaded through
bench/harness/_site/sitecustomize.py: the app carries no hook) and the summary lists the allocation
sites that grew most between about minute 2 and the end.

Messages are loaded a minute's worth at a time, two minutes ahead of their due times, so the table holds
what a steady intake would keep pending rather than the whole run up front."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import tempfile
import threading
import time
from collections import defaultdict
from datetime import timedelta
from pathlib import Path

import psutil
from django.db import connection
from django.utils import timezone

from bench.harness import data, devprocs, figures, sampling, topology

UNBOUNDED_KB = 10**9  # settings require a number; this one no child reaches
SAMPLE_SECONDS = 60
PID_POLL_SECONDS = 2.0  # a replaced child lives at least one task; 2 s catches any that lives longer
LEAD_SECONDS = 10.0
SUMMARY_MINUTES = (1, 10, 20, 30)
SLOPE_WINDOW_MINUTES = 20


def _rss_mb(proc: psutil.Process) -> float | None:
    try:
        return round(proc.memory_info().rss / 2**20, 1)
    except psutil.Error:
        return None


def _tree(pid: int) -> tuple[psutil.Process | None, list[psutil.Process]]:
    try:
        root = psutil.Process(pid)
        return root, root.children(recursive=True)
    except psutil.Error:
        return None, []


class ChildWatch:
    """Every child PID each celery parent has had, polled in a background thread."""

    def __init__(self, parents: dict[str, int]):
        self.parents = parents
        self.seen: dict[str, set[int]] = {name: set() for name in parents}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ChildWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, pid in self.parents.items():
                _, children = _tree(pid)
                self.seen[name].update(c.pid for c in children)
            self._stop.wait(PID_POLL_SECONDS)

    def replacements(self, concurrency: dict[str, int]) -> dict[str, int]:
        return {name: max(0, len(pids) - concurrency[name]) for name, pids in self.seen.items()}


def _sample(topo: topology.Topology, extra: dict[str, devprocs.Proc]) -> tuple[dict, dict]:
    """RSS (MB) by process kind, a list per kind, and the PIDs in the same order."""
    rss: dict[str, list[float]] = defaultdict(list)
    pids: dict[str, list[int]] = defaultdict(list)

    def add(kind: str, proc: psutil.Process) -> float:
        mb = _rss_mb(proc)
        if mb is not None:
            rss[kind].append(mb)
            pids[kind].append(proc.pid)
        return mb or 0.0

    for sender in topo.senders:
        root, children = _tree(sender.pid)
        if root is None:
            continue
        total = add("send_parent", root)
        total += sum(add("send_child", c) for c in children)
        for c in children:
            with contextlib.suppress(psutil.Error):
                # Private pages only: RSS also counts the pages shared with the parent since the fork.
                rss["send_child_uss"].append(round(c.memory_full_info().uss / 2**20, 1))
        rss["send_tree"].append(round(total, 1))
    for kind, proc in (("sweeper", topo.sweeper), ("beat", topo.beat), *extra.items()):
        root, children = _tree(proc.pid)
        if root is None:
            continue
        total = add(f"{kind}_parent" if children else kind, root)
        if children:
            total += sum(add(f"{kind}_child", c) for c in children)
            rss[f"{kind}_tree"].append(round(total, 1))
    if topo.sandbox.process is not None:
        add("sandbox", psutil.Process(topo.sandbox.process.pid))
    return dict(rss), dict(pids)


def _sent(tenant_id: int) -> int:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM scheduling_message WHERE tenant_id = %s AND sent_at IS NOT NULL",
            [tenant_id],
        )
        return cur.fetchone()[0]


def _lag_windows(tenant_id: int, first_due, window_s: int) -> list[dict]:
    """Lag (sent - due) per window of due times; a message counts once it has a sent_at (delivered
    ones included)."""
    with connection.cursor() as cur:
        cur.execute(
            """SELECT floor(extract(epoch FROM due_at - %s) / %s)::int AS w, count(*),
                      count(*) FILTER (WHERE sent_at IS NOT NULL),
                      percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM sent_at - due_at)),
                      percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM sent_at - due_at)),
                      max(extract(epoch FROM sent_at - due_at)),
                      count(*) FILTER (WHERE sent_at < due_at)
               FROM scheduling_message WHERE tenant_id = %s GROUP BY 1 ORDER BY 1""",
            [first_due, window_s, tenant_id],
        )
        rows = cur.fetchall()
    return [
        {
            "window_minutes": f"{w * window_s // 60}-{(w + 1) * window_s // 60}",
            "due": n,
            "sent": sent,
            "lag_p50_s": round(p50, 3) if p50 is not None else None,
            "lag_p99_s": round(p99, 3) if p99 is not None else None,
            "lag_max_s": round(mx, 3) if mx is not None else None,
            "sent_early": early,
        }
        for w, n, sent, p50, p99, mx, early in rows
    ]


def _slope_mb_per_10min(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (minute, MB) in MB per 10 minutes."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(m for m, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((m - mx) ** 2 for m, _ in points)
    if not var:
        return None
    return round(10 * sum((m - mx) * (v - my) for m, v in points) / var, 2)


def _kind_summary(samples: list[dict], minutes: int) -> dict:
    """Per kind: the largest process of the kind at minutes 1, 10, 20, 30 (those the run reached, and its
    last), the maximum over the run, and the slope over the last 20 minutes (or the run after minute 1,
    when shorter). Per send-worker tree: growth over the same window."""
    kinds = sorted({k for s in samples for k in s["rss_mb"]})
    marks = {m for m in SUMMARY_MINUTES if m <= minutes} | {minutes}
    start = max(1, minutes - SLOPE_WINDOW_MINUTES)
    out = {}
    for kind in kinds:
        series = [(s["minute"], max(s["rss_mb"][kind])) for s in samples if s["rss_mb"].get(kind)]
        at = {f"minute_{m}": v for m, v in series if m in marks}
        window = [(m, v) for m, v in series if m >= start]
        out[kind] = {
            **at,
            "max_mb": max((v for _, v in series), default=None),
            f"slope_mb_per_10min_from_minute_{start}": _slope_mb_per_10min(window),
        }
    trees = [s["rss_mb"].get("send_tree", []) for s in samples if s["minute"] >= start]
    if "send_tree" in out and len(trees) >= 2 and trees[0] and trees[-1] and len(trees[0]) == len(trees[-1]):
        out["send_tree"][f"growth_pct_per_worker_from_minute_{start}"] = [
            round(100 * (b - a) / a, 1) for a, b in zip(trees[0], trees[-1], strict=True)
        ]
    return out


def _trace_results(out_dir: Path) -> dict:
    files = sorted(out_dir.glob("tracemalloc-*.json"))
    per_process = []
    merged: dict[str, float] = defaultdict(float)
    for path in files:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        per_process.append(data)
        if data.get("role") == "child" and data["node"].startswith("sender"):
            for site in data.get("top_sites", []):
                merged[site["site"]] += site.get("size_diff_kb", 0.0)
    top = sorted(merged.items(), key=lambda kv: -kv[1])[:15]
    return {
        "dir": str(out_dir),
        "send_children_top_sites_kb": [{"site": s, "size_diff_kb": round(v, 1)} for s, v in top],
        "processes": per_process,
    }


def _receipts_taken(sent: int) -> dict:
    """What the endpoint took in against what the sandbox offered (two callbacks a message: sent, then
    delivered), and what was left unprocessed at the end: tells a slow intake from a slow processor."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*), count(*) FILTER (WHERE processed_at IS NULL) FROM receipts_receiptevent"
        )
        received, unprocessed = cur.fetchone()
    return {"callbacks_offered": 2 * sent, "callbacks_received": received, "unprocessed_at_end": unprocessed}


class VacuumStandIn:
    """What PostgreSQL's autovacuum would do during the run, when the server has it off (as this machine's
    CI configuration does: /etc/postgresql/15/main/conf.d/90-ci.conf). A deployment runs autovacuum
    (docs/deploy.md), and without it the run measures something none has: the tables' statistics stay
    those of the start (before any send) and the dead rows of every processed receipt stay in the
    indexes. Every ``every`` seconds (autovacuum's naptime is 60 s) the tables the run writes are
    vacuumed and analysed; with autovacuum on, or ``every`` 0, it does nothing. The result names what
    it did."""

    TABLES = (
        "scheduling_message",
        "scheduling_messageevent",
        "delivery_attempt",
        "receipts_receiptevent",
        "delivery_ratebucket",
    )

    def __init__(self, every: float) -> None:
        self.every = every
        self.runs = 0
        self.seconds = 0.0
        self.server_autovacuum = ""
        self._stop = threading.Event()
        self._ran = threading.Condition()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> VacuumStandIn:
        if connection.vendor == "postgresql":
            with connection.cursor() as cur:
                cur.execute("SHOW autovacuum")
                self.server_autovacuum = cur.fetchone()[0]
        if self.every > 0 and self.server_autovacuum == "off":
            self._thread = threading.Thread(target=self._run, name="vacuum-stand-in", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(600)

    def _run(self) -> None:
        from django.db import connection as own  # this thread's own connection, in autocommit

        try:
            while not self._stop.wait(self.every):
                started = time.monotonic()
                with own.cursor() as cur:
                    cur.execute(f"VACUUM (ANALYZE) {', '.join(self.TABLES)}")
                with self._ran:
                    self.seconds += time.monotonic() - started
                    self.runs += 1
                    self._ran.notify_all()
        finally:
            own.close()

    def wait_for_runs(self, n: int, timeout: float) -> bool:
        """Wait until ``n`` passes have run (False after ``timeout`` seconds)."""
        with self._ran:
            return self._ran.wait_for(lambda: self.runs >= n, timeout)

    def report(self) -> dict:
        return {
            "server_autovacuum": self.server_autovacuum or "n/a",
            "stand_in": f"VACUUM (ANALYZE) every {self.every:g} s" if self._thread is not None else "none",
            "runs": self.runs,
            "seconds": round(self.seconds, 1),
        }


def soak(
    *,
    rate: int,
    minutes: int,
    concurrency: int,
    latency_ms: int,
    max_memory_kb: int | None,
    trace_memory: bool,
    receipts: bool,
    web_workers: int,
    timeout: float,
    receipt_processes: int = 1,
    web_threads: int = 1,
    vacuum_every: float = 60.0,
) -> dict:

    tenant = data.bench_reset()
    with connection.cursor() as cur:
        cur.execute("TRUNCATE receipts_receiptevent, receipts_webhookdelivery")
    env: dict[str, str] = {}
    if max_memory_kb is None and trace_memory:
        max_memory_kb = 0  # tracing inflates memory, and a replaced child would take its growth with it
    if max_memory_kb is not None:
        env["SMSGW_WORKER_MAX_MEMORY_KB"] = str(max_memory_kb or UNBOUNDED_KB)
    trace_dir = Path(tempfile.mkdtemp(prefix="smsgw-soak-trace-")) if trace_memory else None
    if trace_dir:
        env.update(
            PYTHONPATH=f"{devprocs.ROOT / 'bench' / 'harness' / '_site'}{os.pathsep}{devprocs.ROOT}",
            SMSGW_BENCH_TRACEMALLOC=str(trace_dir),
            # about minute 2 of the load: the workers start some 15-25 s before the first due moment
            SMSGW_BENCH_TRACEMALLOC_BASELINE_S="140",
        )
    port = devprocs.free_port() if receipts else None
    if port:
        env["SMSGW_PUBLIC_BASE_URL"] = f"http://127.0.0.1:{port}"
    topo = topology.Topology(latency_ms=latency_ms, send_concurrency=concurrency, env=env)
    extra: dict[str, devprocs.Proc] = {}
    try:
        if port:
            # The receipt endpoint checks the sandbox's signatures with the auth token topo.env carries.
            web_env = {k: v for k, v in topo.env.items() if not k.startswith(("SMSGW_BENCH", "PYTHONPATH"))}
            extra["web"] = devprocs.gunicorn(web_env, port=port, workers=web_workers, threads=web_threads)
            # More than one process claims receipts safely (SKIP LOCKED: receipts.processor).
            extra["receipts"] = devprocs.celery_worker(
                "receipts", topo.env, queues="receipts,webhooks", concurrency=receipt_processes
            )
        per_minute = rate * 60
        first_due = timezone.now() + timedelta(seconds=LEAD_SECONDS)

        def load(minute: int) -> None:
            data.messages_load(
                tenant,
                per_minute,
                first_due=first_due + timedelta(minutes=minute),
                spread_seconds=60,
                offset=minute * per_minute,
            )

        for m in range(min(2, minutes)):
            load(m)
        with connection.cursor() as cur:
            cur.execute("ANALYZE scheduling_message")
        figures.say(
            f"soak: {rate}/s for {minutes} min from {first_due.isoformat()}, {concurrency} send processes, "
            f"max memory per child {env.get('SMSGW_WORKER_MAX_MEMORY_KB', 'settings default')} KB, "
            f"receipts {'on' if receipts else 'off'}, tracemalloc {'on' if trace_dir else 'off'}"
        )
        parents = {p.name: p.pid for p in topo.senders}
        cpu = sampling.CpuByRole(
            {
                "send": [p.pid for p in topo.senders],
                "sweeper": [topo.sweeper.pid],
                "beat": [topo.beat.pid],
                **{name: [proc.pid] for name, proc in extra.items()},
                "sandbox": [topo.sandbox.process.pid] if topo.sandbox.process is not None else [],
            }
        )
        samples: list[dict] = []
        t0 = time.monotonic() + LEAD_SECONDS
        previous_sent = 0
        expected = dict.fromkeys(parents, concurrency)
        with ChildWatch(parents) as watch, VacuumStandIn(vacuum_every) as vacuum:
            for minute in range(minutes + 1):
                delay = t0 + minute * SAMPLE_SECONDS - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                if minute == 0:
                    cpu.start()  # the load's own window: from the first due moment to the last minute's end
                elif minute == minutes:
                    cpu.stop()
                if minute + 2 < minutes:
                    load(minute + 2)
                rss, pids = _sample(topo, extra)
                sent = _sent(tenant.pk)
                sample = {
                    "minute": minute,
                    "sent": sent,
                    "sent_last_minute": sent - previous_sent,
                    "child_replacements": sum(watch.replacements(expected).values()),
                    "rss_mb": rss,
                    "pids": pids,
                }
                previous_sent = sent
                samples.append(sample)
                figures.say("soak sample " + json.dumps({k: v for k, v in sample.items() if k != "pids"}))
            n = per_minute * minutes
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and _sent(tenant.pk) < n:
                time.sleep(1.0)
            replacements = watch.replacements(expected)
            child_pids = {name: sorted(pids) for name, pids in watch.seen.items()}
        if trace_dir:
            _trace_signal(topo)
        sent = _sent(tenant.pk)
        with connection.cursor() as cur:
            cur.execute(
                "SELECT status, count(*) FROM scheduling_message WHERE tenant_id = %s GROUP BY 1", [tenant.pk]
            )
            statuses = dict(cur.fetchall())
        window = 300 if minutes >= 10 else 60
        sandbox_stats = topo.sandbox.stats()
        result = {
            "scenario": "soak",
            "rate_per_s": rate,
            "minutes": minutes,
            "concurrency": concurrency,
            "broker": topology.broker(),
            "max_memory_per_child_kb": env.get("SMSGW_WORKER_MAX_MEMORY_KB", "settings default (200000)"),
            "tracemalloc": bool(trace_dir),
            "messages": n,
            "sent": sent,
            "statuses": statuses,
            "sandbox_submissions": sandbox_stats["submissions"],
            # The sandbox's side of the callbacks: answered (sent), failed, dropped, still waiting (pending).
            "sandbox_callbacks": sandbox_stats.get("callbacks"),
            "child_replacements": replacements,
            "child_pids_seen": child_pids,
            "vacuum": vacuum.report(),
            "cpu": cpu.result,
            "sweep": figures.sweep_summary(topo.sweep_passes()),
            "rss_summary_mb": _kind_summary(samples, minutes),
            f"lag_per_{window // 60}_min_window": _lag_windows(tenant.pk, first_due, window),
            **({"receipts": {**figures.receipt_lag(), **_receipts_taken(sent)}} if receipts else {}),
            "samples": [{k: v for k, v in s.items() if k != "pids"} for s in samples],
        }
    finally:
        topo.stop()
        for proc in extra.values():
            proc.stop()
    if trace_dir:
        result["tracemalloc_growth"] = _trace_results(trace_dir)
    return result


def _trace_signal(topo: topology.Topology) -> None:
    """Ask every traced process for its diff now, before shutdown changes anything (the shutdown hook
    writes it again, later, if the process stops in time)."""
    for proc in [topo.sweeper, *topo.senders]:
        root, children = _tree(proc.pid)
        for p in [root, *children] if root else []:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGUSR2)
    time.sleep(15)  # a snapshot of a traced heap takes seconds on a busy machine
