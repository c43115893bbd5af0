"""Start-up checks for production mode: a settings module that would run insecurely refuses to load,
with a message naming the variable to set, instead of running and failing later (403 on every provider
callback, session cookies signed with a guessable key). A provider's own credentials are checked by its
package (``ProviderSettings.problem``, e.g. ``delivery.providers.<name>.config``), for every provider a
route can reach (config.settings).

A value copied from a shipped example (``deploy/systemd/smsgw.env.example``, the docs, the sandboxes'
defaults) is refused like a missing one: it is public, so it signs nothing (``placeholder_problem``)."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

# The same thresholds as Django's own deploy check (django.core.checks.security.base, W009): a key
# shorter than 50 characters, with fewer than 5 distinct characters, or one of startproject's
# "django-insecure-" keys is weak. "bench" or "test-only-secret" fail the length test.
SECRET_KEY_MIN_LENGTH = 50
SECRET_KEY_MIN_UNIQUE_CHARACTERS = 5
SECRET_KEY_INSECURE_PREFIX = "django-insecure-"

# What the shipped examples put where a value must be replaced: ``CHANGE_ME`` in
# deploy/systemd/smsgw.env.example (DJANGO_SECRET_KEY's "CHANGE_ME-to-50-random-characters-..." is long
# enough for Django's own check; a host name, a URL's password), and the usual spellings of the same
# instruction. Matched anywhere in the value, case-insensitively.
PLACEHOLDER_MARKERS = ("change-me", "changeme", "change_me", "replace-me", "replace_me", "placeholder")


def placeholder_problem(name: str, value: str, known: tuple[str, ...] = ()) -> str | None:
    """Why ``value`` of setting ``name`` is an example's placeholder (a marker above, or one of the
    ``known`` public values: a sandbox's default credentials), or None."""
    lowered = value.lower()
    marker = next((m for m in PLACEHOLDER_MARKERS if m in lowered), None)
    if marker is not None:
        return f"{name} is a placeholder (it contains {marker!r}): set the real value"
    if value in known:
        return f"{name} is a public example value (a sandbox's default): set the real value"
    return None


def placeholders_refuse(production: bool, **values: str) -> None:
    """In production, stop start-up on any of ``values`` (setting name -> value) left as an example's
    placeholder: the host names, the public URL, the database and broker URLs (a password), the metrics
    token. The message names the variable, never its value (a URL may hold a password)."""
    if not production:
        return
    for name, value in values.items():
        if problem := placeholder_problem(name, value):
            raise ImproperlyConfigured(f"{problem} (SMSGW_ENV=production)")


def secret_key_problem(key: str) -> str | None:
    """Why ``key`` must not sign sessions and tokens in production, or None when it is acceptable."""
    if not key:
        return "DJANGO_SECRET_KEY is not set"
    if key.startswith(SECRET_KEY_INSECURE_PREFIX):
        return f"DJANGO_SECRET_KEY starts with {SECRET_KEY_INSECURE_PREFIX!r} (a development key)"
    if problem := placeholder_problem("DJANGO_SECRET_KEY", key):
        return problem
    if len(key) < SECRET_KEY_MIN_LENGTH:
        return f"DJANGO_SECRET_KEY is {len(key)} characters long; at least {SECRET_KEY_MIN_LENGTH} are needed"
    if len(set(key)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS:
        return f"DJANGO_SECRET_KEY has fewer than {SECRET_KEY_MIN_UNIQUE_CHARACTERS} distinct characters"
    return None
