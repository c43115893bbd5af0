"""The suite's own pytest plugin (loaded first, by ``-p tests.isolation`` in pyproject.toml): what lets it
run in parallel and in two halves without one test seeing another's state.

**Parallel workers, isolated.** Under pytest-xdist each worker process (``PYTEST_XDIST_WORKER`` = gw0,
gw1, …) gets, before Django's settings are read:

- its own var folder (``SMSGW_VAR_DIR``/xdist-gwN): the SQLite test database, the embedded broker's
  folders, the receipt spool and the Prometheus multiprocess metrics folder;
- its own Redis database: the PostgreSQL half's broker URL ``redis://…/9`` becomes ``/10`` for gw0, ``/11``
  for gw1, … (tests flush their broker database before each test);
- its own range of local ports (``SMSGW_TEST_PORTS``, read by ``sandbox.process.unused_port``), from
  ``SMSGW_TEST_PORT_BASE`` (20000 unless set);
- its own test database (pytest-django suffixes the name with the worker id).

Processes a test starts inherit all of it through the environment. A serial run (no xdist) keeps the base
values, so the serial group that runs after the parallel one uses what the workers do not.

**Two halves.** ``--half=sqlite`` keeps the tests that touch no database (they run once, here) and the tests
marked ``sqlite`` or ``embedded``; ``--half=postgres`` keeps every test that uses the database, the
integration tests, and the database-free tests marked ``redis``; ``embedded`` tests run in the SQLite half
only. Without ``--half`` every collected test runs (one file, one test, as a developer asks).

**Serial group.** A test marked ``serial(reason)`` cannot share the machine (a CPU hog, a process-stop
timing, a per-second count): ``--group=parallel`` leaves it out, ``--group=serial`` keeps only such tests.
The reason is required.

**Longest first.** ``tests/durations.json`` (each test's setup + call + teardown seconds, from an earlier
run) orders the tests longest first, so the parallel run's last tests are short ones; a test not in the file
counts as 1 s. Items that share a node id (schemathesis makes one per API operation, all with their test
function's id) share its seconds. ``--store-durations`` rewrites the file from this run.

**Long tier.** Tests marked ``long`` (production-scale variants: minutes each) are skipped unless
``--long`` is given; a scaled version of each guarantee runs every time.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
DURATIONS = Path(__file__).resolve().parent / "durations.json"
# Below the kernel's ephemeral range (32768-60999). Two sessions at once (deploy/test.sh runs the halves
# side by side) each set a base of their own: SMSGW_TEST_PORT_BASE, 20000 and 26000.
PORTS_PER_WORKER = 1000
REDIS_DATABASES = 16  # Redis's default `databases`


def _isolate_worker() -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    slot = int(worker[2:]) + 1 if worker.startswith("gw") else 0
    low = int(os.environ.get("SMSGW_TEST_PORT_BASE", "20000")) + slot * PORTS_PER_WORKER
    os.environ["SMSGW_TEST_PORTS"] = f"{low}-{low + PORTS_PER_WORKER - 1}"
    if not slot:
        return
    var = Path(os.environ.get("SMSGW_VAR_DIR") or ROOT / ".var") / f"xdist-{worker}"
    var.mkdir(parents=True, exist_ok=True)
    os.environ["SMSGW_VAR_DIR"] = str(var)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(var / "metrics")
    broker = os.environ.get("CELERY_BROKER_URL", "")
    if broker.startswith(("redis://", "rediss://")):
        parts = urlsplit(broker)
        base = int(parts.path.strip("/") or 0)
        database = base + slot
        if database >= REDIS_DATABASES:
            raise pytest.UsageError(
                f"{worker}: Redis database {database} does not exist (base {base} + worker); "
                f"use fewer workers or a lower base database in CELERY_BROKER_URL"
            )
        os.environ["CELERY_BROKER_URL"] = urlunsplit(parts._replace(path=f"/{database}"))


_isolate_worker()  # at import: before pytest-django reads the settings


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("smsgw")
    group.addoption(
        "--half",
        choices=("sqlite", "postgres"),
        help="the tests of one half of deploy/test.sh (tests/isolation.py says which)",
    )
    group.addoption(
        "--group",
        choices=("parallel", "serial"),
        help="parallel: leave out the tests marked serial; serial: only those",
    )
    group.addoption("--long", action="store_true", help="also run the long tier (tests marked long)")
    group.addoption(
        "--store-durations", action="store_true", help=f"write each test's duration to {DURATIONS.name}"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "sqlite: about SQLite or the embedded broker: runs in the SQLite half too"
    )
    config.addinivalue_line(
        "markers",
        "embedded: runs the embedded mode (SQLite, filesystem broker) in its own processes: SQLite half only",
    )
    config.addinivalue_line(
        "markers",
        "redis: touches no database but exercises the Redis broker: runs in the PostgreSQL half too",
    )
    config.addinivalue_line(
        "markers", "serial(reason): cannot share the machine with other tests; runs alone, after the rest"
    )
    config.addinivalue_line(
        "markers",
        "long: a production-scale variant (minutes); runs only with --long (./deploy/test.sh --long)",
    )


def _uses_database(item: pytest.Item) -> bool:
    fixtures = getattr(item, "fixturenames", ())
    return item.get_closest_marker("django_db") is not None or any(
        name in fixtures for name in ("db", "transactional_db", "django_db_reset_sequences", "live_server")
    )


def _in_half(item: pytest.Item, half: str) -> bool:
    marked = {name: item.get_closest_marker(name) is not None for name in ("sqlite", "embedded", "redis")}
    database = _uses_database(item) or item.get_closest_marker("integration") is not None
    if half == "sqlite":
        return not database or marked["sqlite"] or marked["embedded"]
    return (database or marked["redis"]) and not marked["embedded"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    half, group, long_tier = config.getoption("half"), config.getoption("group"), config.getoption("long")
    keep, drop = [], []
    for item in items:
        serial = item.get_closest_marker("serial")
        if serial is not None and not (serial.args or serial.kwargs.get("reason")):
            raise pytest.UsageError(f"{item.nodeid}: serial needs its reason, serial(reason=...)")
        wanted = (half is None or _in_half(item, half)) and (
            group is None or (group == "serial") == (serial is not None)
        )
        (keep if wanted else drop).append(item)
        if wanted and item.get_closest_marker("long") is not None and not long_tier:
            item.add_marker(pytest.mark.skip(reason="the long tier: ./deploy/test.sh --long"))
    if drop:
        config.hook.pytest_deselected(items=drop)
    known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    # A node id's seconds are those of all its items: schemathesis makes one item per API operation, all
    # with the test function's node id. Each counts for its share.
    shared = Counter(item.nodeid for item in keep)
    # Longest first; ties in collection order (sorted() is stable), so every xdist worker collects the
    # same order.
    keep.sort(key=lambda item: -known.get(item.nodeid, shared[item.nodeid]) / shared[item.nodeid])
    items[:] = keep


_durations: dict[str, float] | None = None  # this run's, when --store-durations asks for them


def pytest_sessionstart(session: pytest.Session) -> None:
    global _durations
    # Kept in the process that writes the file: the controller under xdist (it receives every worker's
    # reports), the only process otherwise.
    if session.config.getoption("store_durations") and not os.environ.get("PYTEST_XDIST_WORKER"):
        _durations = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _durations is not None:
        _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _durations:
        return
    known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    known.update({nodeid: round(seconds, 2) for nodeid, seconds in _durations.items()})
    DURATIONS.write_text(json.dumps(dict(sorted(known.items())), indent=0) + "\n")
