"""Loaded by every Python process whose PYTHONPATH starts with this folder (bench.scenarios.soak puts it
there for the workers of a ``--trace-memory`` run): installs the tracemalloc hooks of
bench.harness.tracemem when SMSGW_BENCH_TRACEMALLOC names a directory. The app itself carries no hook."""

import os

if os.environ.get("SMSGW_BENCH_TRACEMALLOC"):
    import bench.harness.tracemem  # noqa: F401 - connects the Celery signal handlers
