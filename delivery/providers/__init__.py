"""Provider adapters and the provider registry.

``PROVIDERS`` is the registry: one line per provider, its name (a message's ``provider``) and its package
under this folder. A package declares what the core may ask of it (``smsgw.config.providers``:
``CAPABILITIES``, ``load_settings``, ``create_adapter``); adding a provider is its package plus its line
here. ``get_adapter(name)`` returns this process's adapter for a provider name, or for
``settings.SMSGW_PROVIDER`` (new submissions) when no name is given.

Only modules under this package import a provider SDK or name a provider; callers see
``delivery.providers.base`` types, ``Capabilities`` and ``ProviderQueryError``. This module imports no
package's adapter until it is asked for one: ``config.settings`` imports it (``declare_all``). Nor does it
import Django until asked for an adapter: a provider's sandbox (``<package>.sandbox``) runs under this
package without Django.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from smsgw.config import providers as declarations

if TYPE_CHECKING:
    from delivery.providers.base import ProviderAdapter


class ProviderQueryError(RuntimeError):
    """A look-up (``fetch`` / ``find_submissions``) could not get an answer from the provider (network
    error, 5xx, auth...). ``submit_many`` never raises it: per-message failures are outcomes."""


class Package:
    """A registry entry: the provider package at ``module`` (``delivery.providers.<name>``). Called, it
    creates the adapter for the name it is registered under."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.name = ""  # set by the registry

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)

    def __call__(self) -> ProviderAdapter:
        return self.load().create_adapter(self.name)


# The registry: one line per provider. A factory that is not a Package (e.g. another account of a
# provider, under its own key) is allowed too; it shares its adapter's capabilities.
PROVIDERS: dict[str, Callable[[], ProviderAdapter]] = {
    "twilio": Package("delivery.providers.twilio"),
    "vonage": Package("delivery.providers.vonage"),
}
DEFAULT_PROVIDER = next(iter(PROVIDERS))


def _named() -> None:
    for name, factory in PROVIDERS.items():
        if isinstance(factory, Package) and not factory.name:
            factory.name = name


def _declare(name: str, package: ModuleType, production: bool) -> dict[str, Any]:
    provider_settings = package.load_settings(production)
    declarations.declare(name, package.CAPABILITIES, provider_settings)
    return dict(provider_settings.values)


def declare_all(production: bool) -> dict[str, Any]:
    """Read every registered package's settings from the environment and declare its capabilities
    (``smsgw.config.providers``); returns the Django settings they contribute (``config.settings``)."""
    _named()
    values: dict[str, Any] = {}
    for name, factory in PROVIDERS.items():
        if isinstance(factory, Package):
            values.update(_declare(name, factory.load(), production))
    return values


def register(name: str, module: str, *, production: bool = False) -> dict[str, Any]:
    """Add a provider at run time (a test's own provider): what its registry line does at start-up.
    Returns the settings its package reads (the caller puts them in Django's settings)."""
    entry = PROVIDERS[name] = Package(module)
    entry.name = name
    return _declare(name, entry.load(), production)


def unregister(name: str) -> None:
    PROVIDERS.pop(name, None)
    declarations.forget(name)
    get_adapter.cache_clear()  # type: ignore[attr-defined]


def capabilities(name: str | None = None) -> declarations.Capabilities:
    """What provider ``name`` (default ``settings.SMSGW_PROVIDER``) can do."""
    return get_adapter(name).capabilities


_adapters: dict[tuple[int, str], ProviderAdapter] = {}
_lock = threading.Lock()


def get_adapter(name: str | None = None) -> ProviderAdapter:
    """The per-process adapter for ``name`` (default ``settings.SMSGW_PROVIDER``), created on first use;
    a forked child gets its own. Adapters read their other settings at call time."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    name = name or settings.SMSGW_PROVIDER
    key = (os.getpid(), name)
    adapter = _adapters.get(key)
    if adapter is None:
        with _lock:
            adapter = _adapters.get(key)
            if adapter is None:
                _named()
                factory = PROVIDERS.get(name)
                if factory is None:
                    raise ImproperlyConfigured(
                        f"SMSGW_PROVIDER={name!r} is not a known provider ({', '.join(sorted(PROVIDERS))})"
                    )
                adapter = _adapters[key] = factory()
    return adapter


def providers_preload() -> None:
    """Import every registered adapter and its SDK (in a worker's parent, before the pool forks)."""
    _named()
    for factory in PROVIDERS.values():
        factory().preload()


def providers_warm() -> None:
    """Create this process's adapters and start what they need to submit (a pool child, at start)."""
    from django.core.exceptions import ImproperlyConfigured

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

__all__ = [
    "DEFAULT_PROVIDER",
    "PROVIDERS",
    "Package",
    "ProviderQueryError",
    "capabilities",
    "declare_all",
    "get_adapter",
    "providers_preload",
    "providers_warm",
    "register",
    "unregister",
]
