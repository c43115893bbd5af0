"""gunicorn's configuration for every way smsgw's web role is started (deploy/Procfile, the systemd
unit, deploy/embedded.py, bench/harness/devprocs.py, the integration tests):
``--config python:smsgw.runtime.gunicorn_conf``. The command lines keep the settings that differ between
them (bind, workers, worker class, logs)."""

from __future__ import annotations

from smsgw.runtime import gunicorn_errors

# Long enough that Django sees every URL up to the API's own limit and answers it in the envelope (414
# naming the URL past smsgw.http.boundary.MAX_URL_BYTES; a cursor too long for one a 400 naming cursor).
limit_request_line = gunicorn_errors.LIMIT_REQUEST_LINE
# gunicorn's default access line, and the answer's Request-Id (smsgw.http.request_id): a request's access
# line is found by the id as its application lines are.
access_log_format = '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" request_id=%({request-id}o)s'


def on_starting(server) -> None:
    """In the master, before it forks a worker: gunicorn's own refusals answer JSON, not HTML."""
    gunicorn_errors.install()


def post_fork(server, worker) -> None:
    """In each worker, after the fork: its own tracer provider (smsgw.tracing), when the application was
    loaded before the fork (--preload) and tracing is on; otherwise the first traced request makes it."""
    from django.conf import settings

    if settings.configured:
        from smsgw import tracing

        tracing.setup("web")


def worker_exit(server, worker) -> None:
    """In a worker that is stopping (a restart, max-requests, the server stopping): its spans are exported
    before it exits (smsgw.tracing; nothing when tracing is off)."""
    from django.conf import settings

    if settings.configured:
        from smsgw import tracing

        tracing.shutdown()
