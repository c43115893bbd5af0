"""GET /metrics: Prometheus text format, behind a bearer token (SMSGW_METRICS_TOKEN).

Without a configured token the route answers 404, as if it did not exist: figures about tenants' traffic
are not public, and an unconfigured gateway exposes nothing. A missing or wrong token answers 401.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import Http404, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from reporting.state import StateCollector


def registry_build(*, state: bool = True) -> CollectorRegistry:
    """A fresh registry per scrape: the event files of every process on this host, and (``state``) the
    figures read from the database."""
    registry = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(registry)
    if state:
        registry.register(StateCollector())
    return registry


def token_ok(header: str, token: str) -> bool:
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


@require_GET
def metrics(request):
    token = settings.METRICS_TOKEN
    if not token:
        raise Http404
    if not token_ok(request.headers.get("Authorization", ""), token):
        response = HttpResponse("unauthorized\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(generate_latest(registry_build()), content_type=CONTENT_TYPE_LATEST)
