"""Typed environment readers that fail loudly on bad values (a typo must not silently become a default).

Secrets (``env_secret``, and ``secret=True`` on the structured readers) may come as deployments hand them
over, not only as plain variables: ``NAME_FILE`` holds the path of a file whose content is the value (the
Docker and Kubernetes convention: ``/run/secrets/...``, a mounted Secret), or systemd passes the
credential ``NAME`` (``LoadCredential=NAME:...`` in the unit; the file ``$CREDENTIALS_DIRECTORY/NAME``).
One source only: two of them set is an error naming both, so an old value left behind never wins
silently. An error names the variable and the file, never the content.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


# systemd sets it for a unit with LoadCredential= (systemd.exec(5), "Credentials"): a private read-only
# folder holding one file per credential, named by the credential's id.
CREDENTIALS_DIRECTORY = "CREDENTIALS_DIRECTORY"


def _read_secret_file(path: str, origin: str) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        # The path, never the content: a secret must not reach a log or a traceback.
        raise ImproperlyConfigured(f"{origin}: the file {path} cannot be read ({why})") from None
    # An editor's or `echo`'s final newline is not part of the secret; anything else is.
    return text.removesuffix("\n").removesuffix("\r")


def secret_raw(name: str) -> str | None:
    """The secret ``name`` from its one source (the variable, ``NAME_FILE`` or the systemd credential
    ``NAME``), or None when none is set. Blank counts as unset, as a blank line in an env file does."""
    sources: list[tuple[str, str]] = []  # (what the operator set, how to read it)
    if os.environ.get(name, "").strip():
        sources.append((name, "value"))
    file_path = os.environ.get(f"{name}_FILE", "").strip()
    if file_path:
        sources.append((f"{name}_FILE", file_path))
    credentials = os.environ.get(CREDENTIALS_DIRECTORY, "").strip()
    credential = Path(credentials, name) if credentials else None
    if credential is not None and credential.is_file():
        sources.append((f"the systemd credential {name} ({credential})", str(credential)))
    if len(sources) > 1:
        raise ImproperlyConfigured(
            f"{name} is set more than once: {' and '.join(s for s, _ in sources)}; keep one of them"
        )
    if not sources:
        return None
    origin, how = sources[0]
    if how == "value":
        return os.environ[name]
    return _read_secret_file(how, origin)


def env_secret(name: str, default: str = "") -> str:
    """A secret string: the variable ``name``, the file ``NAME_FILE`` names, or the systemd credential
    ``NAME`` (module docstring)."""
    value = secret_raw(name)
    return default if value is None else value


def env_is_set(name: str) -> bool:
    """Whether the variable is set to something other than blanks."""
    return bool(os.environ.get(name, "").strip())


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {value}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}, got {value}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_pairs(name: str, *, secret: bool = False) -> dict[str, str]:
    """``id1:secret1,id2:secret2`` -> {id: secret} (several entries allow a rotation without downtime).
    ``secret``: also from ``NAME_FILE`` or a systemd credential (``env_secret``)."""
    raw = (secret_raw(name) or "") if secret else os.environ.get(name, "")
    out: dict[str, str] = {}
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition(":")
        if not sep or not key.strip() or not value.strip():
            raise ImproperlyConfigured(f"{name} must be a comma-separated list of id:secret pairs")
        out[key.strip()] = value.strip()
    return out


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return value


def env_json_object(name: str, default: dict | None = None, *, secret: bool = False) -> dict:
    """A JSON object (``{"bucket_name": "exports"}``); bad JSON or another JSON type is an error naming the
    variable, never a silent default. ``secret``: also from ``NAME_FILE`` or a systemd credential."""
    raw = secret_raw(name) if secret else os.environ.get(name)
    if raw is None or raw.strip() == "":
        return dict(default or {})
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a JSON object, got invalid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object, got {type(value).__name__}")
    return value
