"""Benchmarks and the process harness: tooling, not product code.

``python -m bench <scenario>`` runs the scenarios (``core``: burst, steady, pending, ingest; ``faults``;
``facade``, the Twilio-compatible API beside ``/v1/``; ``pacing``; ``receipts``; ``schedules``;
``baseline``, the Celery ETA reference the burst is compared with); ``devprocs`` starts the gateway's
own processes (celery worker, beat, gunicorn) as real subprocesses for them and for the integration
tests. Nothing in smsgw/, scheduling/, delivery/ or receipts/ imports this package at module level, and
its extra dependencies (psutil) are in the dev dependency group only."""
