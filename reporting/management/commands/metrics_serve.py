"""manage.py metrics_serve: the event figures of a host that runs no web process (workers only).

Event counters live in per-host files (prometheus-client multiprocess mode, smsgw.observability.events):
the web's /metrics serves its own host's files and the state figures; on a worker-only host this serves
the host's files, behind the same bearer token, without the state figures (they come from the database,
and one copy is enough: the web's). Scrape both with the same job; sum() over instances adds them up.
"""

from __future__ import annotations

from wsgiref.simple_server import WSGIRequestHandler, make_server

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from reporting.views import registry_build, token_ok


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # one line per scrape is noise; errors still surface
        pass


def metrics_app(environ, start_response):
    token = settings.METRICS_TOKEN
    if environ.get("PATH_INFO") != "/metrics" or environ.get("REQUEST_METHOD") != "GET":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]
    if not token_ok(environ.get("HTTP_AUTHORIZATION", ""), token):
        start_response("401 Unauthorized", [("Content-Type", "text/plain"), ("WWW-Authenticate", "Bearer")])
        return [b"unauthorized\n"]
    body = generate_latest(registry_build(state=False))
    start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST), ("Content-Length", str(len(body)))])
    return [body]


class Command(BaseCommand):
    help = "Serve this host's event metrics on GET /metrics (bearer SMSGW_METRICS_TOKEN), for worker hosts."

    def add_arguments(self, parser):
        parser.add_argument("--bind", default="127.0.0.1:9108", help="host:port (default 127.0.0.1:9108)")

    def handle(self, *args, bind, **options):
        if not settings.METRICS_TOKEN:
            raise CommandError("set SMSGW_METRICS_TOKEN: the metrics are not served without a token")
        host, _, port = bind.rpartition(":")
        server = make_server(host or "127.0.0.1", int(port), metrics_app, handler_class=_QuietHandler)
        self.stdout.write(
            f"metrics on http://{host or '127.0.0.1'}:{server.server_port}/metrics", ending="\n"
        )
        self.stdout.flush()
        server.serve_forever()
