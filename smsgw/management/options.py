"""Option parsing shared by the management commands: an error names the option, as CommandError shows it."""

from __future__ import annotations

from django.core.management.base import CommandError

from smsgw.tenancy.scopes import UnknownScope, scopes_parse


def scopes_option(text: str) -> list[str]:
    """``--scopes`` (comma-separated, docs/api.md#scopes): at least one known scope, or ``*``."""
    try:
        scopes = scopes_parse(text)
    except UnknownScope as exc:
        raise CommandError(f"--scopes: {exc}") from exc
    if not scopes:
        raise CommandError("--scopes: name at least one scope (or * for full access)")
    return scopes
