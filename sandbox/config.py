"""The checks of a config value that every sandbox's config shares (numbers in a range, integers,
booleans, lists of strings) and the refusal of ``outage=refuse`` without a control port. Each raises
ValueError naming the key. Must not import Django.
"""

from __future__ import annotations

import json
from typing import Any


def as_list(key: str, value: Any) -> list[str]:
    """A JSON list of strings, or (flags, env) a JSON list or comma-separated text."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError:
                raise ValueError(f"{key} must be a list of strings") from None
        else:
            value = [item for item in text.split(",") if item.strip()]
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{key} must be a list of strings")
    return [item.strip() for item in value if item.strip()]


def _as_float(key: str, value: Any, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{key} must be a number")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{key} must be a number") from None
    if not (lo <= number <= hi):
        raise ValueError(f"{key} must be between {lo} and {hi}")
    return number


def _as_int(key: str, value: Any, lo: int = 0, hi: int | None = None) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{key} must be an integer")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be an integer") from None
    if number < 0 or number != float(value):
        raise ValueError(f"{key} must be a non-negative integer")
    if number < lo or (hi is not None and number > hi):
        raise ValueError(f"{key} must be between {lo} and {hi}")
    return number


def as_bool(key: str, value: Any) -> bool:
    """A JSON bool, or (flags, env) true/false, 1/0, yes/no, on/off."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{key} must be true or false")


def as_url(key: str, value: Any) -> str:
    """An http:// or https:// URL, or empty for none."""
    if not isinstance(value, str) or (value and not value.startswith(("http://", "https://"))):
        raise ValueError(f"{key} must be an http:// or https:// URL, or empty")
    return value


REFUSE_NEEDS_CONTROL = "outage refuse closes the API port: it needs a separate control port (--control-port)"
