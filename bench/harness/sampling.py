"""What the processes of a run use: peak memory and CPU by kind of process (``MemorySampler``), and the
cores each role used over a window (``CpuByRole``)."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field

import psutil


@dataclass
class MemorySampler:
    """Peak RSS per process over the worker process trees, sampled in a background thread."""

    pids: list[int]
    interval: float = 0.25
    peak_process_mb: float = 0.0
    peak_total_mb: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self):
        self._cpu_start = cpu_by_kind(self.pids)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time each kind of process used while the sampler ran (workers, postgres, redis, ...)."""
        return {k: round(v - self._cpu_start.get(k, 0.0), 2) for k, v in cpu_by_kind(self.pids).items()}

    def _run(self):
        while not self._stop.is_set():
            total = 0.0
            for pid in self.pids:
                try:
                    root = psutil.Process(pid)
                    for proc in [root, *root.children(recursive=True)]:
                        rss = proc.memory_info().rss / 2**20
                        total += rss
                        self.peak_process_mb = max(self.peak_process_mb, rss)
                except psutil.Error:
                    continue
            self.peak_total_mb = max(self.peak_total_mb, total)
            self._stop.wait(self.interval)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def cpu_by_kind(worker_pids: list[int]) -> dict[str, float]:
    """Cumulative CPU seconds by process kind, children included. Kinds: each worker tree by its
    celery node name, plus postgres, redis, rabbitmq and the sandbox found by name."""
    out: dict[str, float] = {}
    seen = set()
    for pid in worker_pids:
        try:
            root = psutil.Process(pid)
            name = next((a.split("@")[0] for a in root.cmdline() if "@" in a), str(pid))
            # What the root's children that already ended used (a pool child replaced after its memory
            # limit or task count takes its CPU time with it otherwise).
            ended = root.cpu_times()
            total = ended.children_user + ended.children_system
            for proc in [root, *root.children(recursive=True)]:
                t = proc.cpu_times()
                total += t.user + t.system
                seen.add(proc.pid)
            out[name] = total
        except psutil.Error:
            continue
    for proc in psutil.process_iter(["name", "cmdline", "cpu_times"]):
        if proc.pid in seen or proc.info["cpu_times"] is None:
            continue
        cmd = " ".join(proc.info["cmdline"] or [])
        kind = (
            "postgres"
            if proc.info["name"].startswith("postgres")
            else "redis"
            if "redis-server" in cmd
            else "rabbitmq"
            if "beam" in proc.info["name"]
            else "sandbox"
            if "-m delivery.providers." in cmd and ".sandbox" in cmd
            else "beat"
            if " beat " in cmd
            else "web"
            if "gunicorn" in cmd
            else None
        )
        if kind:
            out[kind] = out.get(kind, 0.0) + proc.info["cpu_times"].user + proc.info["cpu_times"].system
    return out


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds a process tree has used: each live process's own time plus that of the children it has
    reaped (the kernel adds a child's time to its parent's when the parent waits for it). A process that
    ended inside the window is counted once, in its parent's; a pool child replaced, a PostgreSQL backend
    that closed, keep their time in the total, where a sum over the live processes alone would drop it."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def _root_pids(name: str) -> list[int]:
    """The processes called ``name`` whose parent is not: the PostgreSQL postmaster, the Redis server."""
    roots = []
    for proc in psutil.process_iter(["name", "ppid"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["name"] == name and psutil.Process(proc.info["ppid"]).name() != name:
                roots.append(proc.pid)
    return roots


def _machine_busy() -> float:
    """Seconds of CPU busy, summed over cores, since boot (/proc/stat: all but idle and iowait)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


class CpuByRole:
    """Cores each role used over a window: the send workers, the sweeper, beat, the web and receipt
    processes, the sandbox, PostgreSQL and Redis (each a process tree), this driver, and the machine's
    own count beside them. Two snapshots, no polling: whatever ended between them is still counted."""

    def __init__(self, roles: dict[str, list[int]]) -> None:
        self.roles = {**roles, "postgresql": _root_pids("postgres"), "redis": _root_pids("redis-server")}
        self._start: tuple[float, float, dict[str, float]] | None = None
        self.result: dict = {}

    def _snapshot(self) -> tuple[float, float, dict[str, float]]:
        used = {role: sum(tree_cpu_seconds(pid) for pid in pids) for role, pids in self.roles.items()}
        # This process alone: every process above is its child, and their time is counted once, above.
        me = psutil.Process().cpu_times()
        used["bench_driver"] = me.user + me.system
        return time.monotonic(), _machine_busy(), used

    def start(self) -> None:
        self._start = self._snapshot()

    def stop(self) -> dict:
        assert self._start is not None, "start() first"
        (t0, busy0, used0), (t1, busy1, used1) = self._start, self._snapshot()
        seconds = t1 - t0
        spent = {role: used1[role] - used0[role] for role in used0}
        by_role = {role: round(s / seconds, 3) for role, s in spent.items()}
        self.result = {
            "seconds": round(seconds, 3),
            "cores_by_role": dict(sorted(by_role.items(), key=lambda kv: -kv[1])),
            # The seconds themselves, for a per-request figure: cores times the window as printed
            # carries both roundings.
            "cpu_seconds_by_role": {role: round(s, 4) for role, s in spent.items()},
            "cores_counted": round(sum(by_role.values()), 3),
            "cores_busy_machine": round((busy1 - busy0) / seconds, 3),
            "cores": psutil.cpu_count(),
        }
        return self.result
