"""Admin login attempts (django-axes): the address an attempt is counted against, and the two limits.

Behind the TLS proxy (SMSGW_TLS=proxy, production's default) every request arrives from the proxy, so
REMOTE_ADDR would lock out a username for everyone at once. The proxy appends the address it saw to
X-Forwarded-For; the rightmost entry is that one (entries to its left are whatever the client sent,
and a client can forge them). One proxy hop is assumed, as for X-Forwarded-Proto
(docs/deploy.md, "Production mode and TLS").

Two limits (AXES_LOCKOUT_PARAMETERS names both scopes, in this order): SMSGW_ADMIN_LOGIN_FAILURES for
one username from one address, and SMSGW_ADMIN_LOGIN_FAILURES_PER_USER for one username from all
addresses together. The second is larger, so that a colleague's typos or one attacker's guesses do not
lock a person out, while a guess spread over many addresses (a botnet against one username) is stopped
all the same. Axes compares every scope with one limit, so this handler reports a username over its
own limit as a pair at the pair's limit."""

from __future__ import annotations

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_failure_limit
from django.conf import settings
from django.db.models import Sum


def client_ip(request) -> str | None:
    if settings.SMSGW_TLS == "proxy":
        forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        if forwarded and forwarded[-1]:
            return forwarded[-1][:45]
    return request.META.get("REMOTE_ADDR")


def _failures(attempts) -> int:
    return attempts.aggregate(n=Sum("failures_since_start"))["n"] or 0


class LoginLockoutHandler(AxesDatabaseHandler):
    """Axes' database handler with a separate, larger limit for a username across addresses."""

    def get_failures(self, request, credentials: dict | None = None) -> int:
        pair, *username = self.get_user_attempts(request, credentials)
        failures = _failures(pair)
        if username and _failures(username[0]) >= settings.ADMIN_LOGIN_FAILURES_PER_USER:
            return max(failures, get_failure_limit(request, credentials))
        return failures
