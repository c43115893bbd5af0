"""Start-up checks for production mode: a settings module that would run insecurely refuses to load,
with a message naming the variable to set, instead of running and failing later (403 on every provider
callback, session cookies signed with a guessable key). A provider's own credentials are checked by its
package (``ProviderSettings.problem``, e.g. ``delivery.providers.<name>.config``)."""

from __future__ import annotations

# The same thresholds as Django's own deploy check (django.core.checks.security.base, W009): a key
# shorter than 50 characters, with fewer than 5 distinct characters, or one of startproject's
# "django-insecure-" keys is weak. "bench" or "test-only-secret" fail the length test.
SECRET_KEY_MIN_LENGTH = 50
SECRET_KEY_MIN_UNIQUE_CHARACTERS = 5
SECRET_KEY_INSECURE_PREFIX = "django-insecure-"


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
