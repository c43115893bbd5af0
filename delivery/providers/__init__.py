"""Provider adapters. ``get_adapter(name)`` returns this process's adapter for a provider name (a message's
``provider``), or for ``settings.SMSGW_PROVIDER`` (new submissions) when no name is given.

Only modules under this package import a provider SDK; callers see ``delivery.providers.base`` types and
``ProviderQueryError``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from delivery.providers.base import ProviderAdapter


class ProviderQueryError(RuntimeError):
    """A look-up (``fetch`` / ``find_submissions``) could not get an answer from the provider (network
    error, 5xx, auth...). ``submit_many`` never raises it: per-message failures are outcomes."""


def _twilio() -> ProviderAdapter:
    from delivery.providers.twilio.adapter import TwilioAdapter

    return TwilioAdapter()


PROVIDERS: dict[str, Callable[[], ProviderAdapter]] = {"twilio": _twilio}

_adapters: dict[tuple[int, str], ProviderAdapter] = {}
_lock = threading.Lock()


def get_adapter(name: str | None = None) -> ProviderAdapter:
    """The per-process adapter for ``name`` (default ``settings.SMSGW_PROVIDER``), created on first use;
    a forked child gets its own. Adapters read their other settings at call time."""
    name = name or settings.SMSGW_PROVIDER
    key = (os.getpid(), name)
    adapter = _adapters.get(key)
    if adapter is None:
        with _lock:
            adapter = _adapters.get(key)
            if adapter is None:
                factory = PROVIDERS.get(name)
                if factory is None:
                    raise ImproperlyConfigured(
                        f"SMSGW_PROVIDER={name!r} is not a known provider ({', '.join(sorted(PROVIDERS))})"
                    )
                adapter = _adapters[key] = factory()
    return adapter


def providers_preload() -> None:
    """Import every registered adapter and its SDK (in a worker's parent, before the pool forks)."""
    for factory in PROVIDERS.values():
        factory().preload()


def providers_warm() -> None:
    """Create this process's adapters and start what they need to submit (a pool child, at start)."""
    for name in PROVIDERS:
        try:
            get_adapter(name).warm()
        except ImproperlyConfigured:
            continue


def _cache_clear() -> None:
    """Forget (and close) the cached adapters, e.g. between tests."""
    with _lock:
        adapters = [a for (pid, _), a in _adapters.items() if pid == os.getpid()]
        _adapters.clear()
    for adapter in adapters:
        close = getattr(adapter, "close", None)
        if close is not None:
            close()


get_adapter.cache_clear = _cache_clear  # type: ignore[attr-defined]

__all__ = ["PROVIDERS", "ProviderQueryError", "get_adapter", "providers_preload", "providers_warm"]
