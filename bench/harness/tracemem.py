"""Where a Celery worker's Python memory grows (``bench soak --trace-memory``; never imported by the app).

Imported at interpreter start by bench/harness/_site/sitecustomize.py when SMSGW_BENCH_TRACEMALLOC names
a directory. In the send workers (SMSGW_BENCH_TRACEMALLOC_NODES), in the parent (``worker_init``) and in
each pool child (``worker_process_init``), it starts tracemalloc, takes a baseline snapshot
SMSGW_BENCH_TRACEMALLOC_BASELINE_S after the process started (default 120: past start-up, warm caches
and the first batches), and on SIGUSR2 or at shutdown writes ``<dir>/tracemalloc-<node>-<pid>.json``:
the 15 allocation sites (file:line) that grew most since the baseline, the 3 biggest growths by
traceback, and traced-versus-resident memory (growth that tracemalloc does not see is outside Python's
allocations: C libraries, or the allocator's fragmentation). Tracing costs CPU and memory of its own,
so RSS figures of such a run are not comparable with an untraced one.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import tracemalloc
from pathlib import Path

from celery.signals import worker_init, worker_process_init, worker_process_shutdown, worker_shutdown

OUT_DIR = Path(os.environ.get("SMSGW_BENCH_TRACEMALLOC", "."))
BASELINE_AFTER = float(os.environ.get("SMSGW_BENCH_TRACEMALLOC_BASELINE_S", "120"))
FRAMES = int(os.environ.get("SMSGW_BENCH_TRACEMALLOC_FRAMES", "8"))
# Only these workers (celery node name prefixes): tracing roughly doubles a process's CPU, and a traced
# sweeper or receipts worker on two shared cores starves the send workers it is meant to observe.
NODES = tuple(os.environ.get("SMSGW_BENCH_TRACEMALLOC_NODES", "sender").split(","))
TOP = 15

_state: dict = {}
_lock = threading.Lock()
_FILTERS = [
    tracemalloc.Filter(False, tracemalloc.__file__),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
    tracemalloc.Filter(False, "<unknown>"),
]


def _node() -> str:
    for arg in sys.argv:
        if "@" in arg:
            return arg.split("@")[0]
    return "proc"


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _start(role: str) -> None:
    global _lock
    if not _node().startswith(NODES):
        return
    _lock = threading.Lock()  # a fork can copy the lock held by the parent's baseline thread
    if tracemalloc.is_tracing():
        # A pool child inherits the parent's traces through fork: only its own allocations count.
        tracemalloc.clear_traces()
    else:
        tracemalloc.start(FRAMES)
    _state.clear()
    _state.update(role=role, started=time.time(), pid=os.getpid())
    timer = threading.Timer(BASELINE_AFTER, _baseline)
    timer.daemon = True
    timer.start()
    signal.signal(signal.SIGUSR2, lambda *_: threading.Thread(target=_dump, args=("SIGUSR2",)).start())


def _baseline() -> None:
    with _lock:
        if _state.get("pid") != os.getpid():
            return
        _state["baseline"] = tracemalloc.take_snapshot().filter_traces(_FILTERS)
        _state["baseline_at"] = time.time()
        _state["baseline_rss_kb"] = _rss_kb()
        _state["baseline_traced_kb"] = tracemalloc.get_traced_memory()[0] // 1024


def _frame(frame) -> str:
    return f"{frame.filename.removeprefix(str(Path.cwd()) + '/')}:{frame.lineno}"


def _grown(diffs: list, top: int = TOP) -> list:
    """The largest growths (compare_to orders by absolute change, shrinking included)."""
    return sorted((d for d in diffs if d.size_diff > 0), key=lambda d: -d.size_diff)[:top]


def _dump(why: str) -> None:
    with _lock:
        if _state.get("pid") != os.getpid():
            return  # not traced, or a forked copy of its parent's state
        snap = tracemalloc.take_snapshot().filter_traces(_FILTERS)
        base = _state.get("baseline")
        current, peak = tracemalloc.get_traced_memory()
        out: dict = {
            "node": _node(),
            "role": _state["role"],
            "pid": os.getpid(),
            "why": why,
            "seconds_since_start": round(time.time() - _state["started"], 1),
            "rss_kb": _rss_kb(),
            "traced_kb": current // 1024,
            "traced_peak_kb": peak // 1024,
        }
        if base is None:
            out["baseline"] = None
            out["top_sites"] = [
                {"site": _frame(s.traceback[0]), "size_kb": s.size // 1024, "count": s.count}
                for s in snap.statistics("lineno")[:TOP]
            ]
        else:
            out.update(
                baseline_seconds_since_start=round(_state["baseline_at"] - _state["started"], 1),
                rss_growth_kb=out["rss_kb"] - _state["baseline_rss_kb"],
                traced_growth_kb=out["traced_kb"] - _state["baseline_traced_kb"],
                top_sites=[
                    {
                        "site": _frame(s.traceback[0]),
                        "size_diff_kb": round(s.size_diff / 1024, 1),
                        "count_diff": s.count_diff,
                        "size_kb": round(s.size / 1024, 1),
                    }
                    for s in _grown(snap.compare_to(base, "lineno"))
                ],
                top_tracebacks=[
                    {
                        "size_diff_kb": round(s.size_diff / 1024, 1),
                        "count_diff": s.count_diff,
                        "frames": [_frame(f) for f in s.traceback],
                    }
                    for s in _grown(snap.compare_to(base, "traceback"), 3)
                ],
            )
        path = OUT_DIR / f"tracemalloc-{out['node']}-{_state['role']}-{os.getpid()}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(out, indent=1))
        tmp.replace(path)  # a dump cut short by a kill never leaves half a file


@worker_init.connect
def _parent_start(**_kwargs) -> None:
    _start("parent")


@worker_process_init.connect
def _child_start(**_kwargs) -> None:
    _start("child")


@worker_process_shutdown.connect
def _child_stop(**_kwargs) -> None:
    _dump("shutdown")


@worker_shutdown.connect
def _parent_stop(**_kwargs) -> None:
    _dump("shutdown")
