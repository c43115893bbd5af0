"""The address an admin login attempt is counted against (django-axes, AXES_CLIENT_IP_CALLABLE).

Behind the TLS proxy (SMSGW_TLS=proxy, production's default) every request arrives from the proxy, so
REMOTE_ADDR would lock out a username for everyone at once. The proxy appends the address it saw to
X-Forwarded-For; the rightmost entry is that one (entries to its left are whatever the client sent,
and a client can forge them). One proxy hop is assumed, as for X-Forwarded-Proto
(docs/deploy.md, "Production mode and TLS")."""

from __future__ import annotations

from django.conf import settings


def client_ip(request) -> str | None:
    if settings.SMSGW_TLS == "proxy":
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        if forwarded and forwarded[-1]:
            return forwarded[-1][:45]
    return request.META.get("REMOTE_ADDR")
