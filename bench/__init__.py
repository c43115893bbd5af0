"""Benchmarks and the process harness: tooling, not product code. Three rooms, each importing only the
ones below it (the import contracts in pyproject.toml keep it so):

* ``bench.command``: ``python -m bench <scenario>``, its options and dispatch;
* ``bench.scenarios``: one module a scenario or family (``throughput``: burst, steady, pending;
  ``ingest``; ``faults``; ``facade``, the Twilio-compatible API beside ``/v1/``; ``pacing``;
  ``receipts``; ``schedules``; ``baseline``, the Celery ETA reference the burst is compared with; the
  embedded run under load, ``python -m bench.scenarios.embedded``; ...);
* ``bench.harness``: what they stand on, and the integration tests too: ``devprocs`` starts the
  gateway's own processes (celery worker, beat, gunicorn) as real subprocesses, ``topology`` a
  scenario's set of them, ``embedded`` the embedded run; ``data`` the bench tenant and its messages,
  ``figures``, ``sampling`` and ``load`` what a run measures and the load it puts on the web.

Nothing in smsgw/, scheduling/, delivery/ or receipts/ imports this package, and its extra dependencies
(psutil) are in the dev dependency group only."""
