"""Start-up checks for production mode: a settings module that would run insecurely refuses to load,
with a message naming the variable to set, instead of running and failing later (403 on every provider
callback, session cookies signed with a guessable key)."""

from __future__ import annotations

import re

# The same thresholds as Django's own deploy check (django.core.checks.security.base, W009): a key
# shorter than 50 characters, with fewer than 5 distinct characters, or one of startproject's
# "django-insecure-" keys is weak. "bench" or "test-only-secret" fail the length test.
SECRET_KEY_MIN_LENGTH = 50
SECRET_KEY_MIN_UNIQUE_CHARACTERS = 5
SECRET_KEY_INSECURE_PREFIX = "django-insecure-"

# An Account SID is "AC" and 32 hex digits: twilio-oai, twilio_api_v2010.yaml, components
# api.v2010.account.message `account_sid`: pattern ^AC[0-9a-fA-F]{32}$.
ACCOUNT_SID_RE = re.compile(r"^AC[0-9a-fA-F]{32}$")


def secret_key_problem(key: str) -> str | None:
    """Why ``key`` must not sign sessions and tokens in production, or None when it is acceptable."""
    if not key:
        return "DJANGO_SECRET_KEY is not set"
    if key.startswith(SECRET_KEY_INSECURE_PREFIX):
        return f"DJANGO_SECRET_KEY starts with {SECRET_KEY_INSECURE_PREFIX!r} (a development key)"
    if len(key) < SECRET_KEY_MIN_LENGTH:
        return f"DJANGO_SECRET_KEY is {len(key)} characters long; at least {SECRET_KEY_MIN_LENGTH} are needed"
    if len(set(key)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS:
        return f"DJANGO_SECRET_KEY has fewer than {SECRET_KEY_MIN_UNIQUE_CHARACTERS} distinct characters"
    return None


def twilio_credentials_problem(account_sid: str, auth_token: str) -> str | None:
    """Why the Twilio provider cannot run with these credentials, or None. Without them every
    submission answers 401/20003 and every signed status callback fails validation (403)."""
    missing = [
        name
        for name, value in (("TWILIO_ACCOUNT_SID", account_sid), ("TWILIO_AUTH_TOKEN", auth_token))
        if not value
    ]
    if missing:
        return f"{' and '.join(missing)} must be set when SMSGW_PROVIDER=twilio"
    if not ACCOUNT_SID_RE.match(account_sid):
        return "TWILIO_ACCOUNT_SID must be 'AC' followed by 32 hexadecimal digits"
    return None
