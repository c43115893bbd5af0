"""Provider adapters and the provider registry.

``PROVIDERS`` is the registry: one line per provider, its name (a message's ``provider``) and its package
under this folder. A package declares what the core may ask of it (``smsgw.config.providers``:
``CAPABILITIES``, ``load_settings``, ``create_adapter``) and carries its whole kit: its sandbox, the
``kit`` module that tells the embedded run and the test harness how to start that sandbox and point the
gateway at it (``delivery.providers.kits``), and its tests (``<package>/tests/``, collected with the
suite). Adding a provider is its package plus its line here; a package installed from elsewhere is
registered by ``SMSGW_PROVIDER_PACKAGES`` (``name=module``, comma-separated) instead of a line.
``get_adapter(name)`` returns this process's adapter for a provider name, or for ``settings.SMSGW_PROVIDER``
(new submissions) when no name is given.

Only modules under this package import a provider SDK or name a provider; callers see
``delivery.providers.base`` types, ``Capabilities`` and ``ProviderQueryError``. This module imports no
package's adapter until it is asked for one: ``config.settings`` imports it (``declare_all``). Nor does it
import Django until asked for an adapter: a provider's sandbox (``<package>.sandbox``) runs under this
package without Django.
"""

from __future__ import annotations

import importlib
import os
import re
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

# A registered name is a message's ``provider`` (and a URL segment: ``/receipts/<provider>/``); a module is
# a dotted path (never a file path or anything importlib would read otherwise).
_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}(?:\.[A-Za-z_][A-Za-z0-9_]{0,99}){0,9}")
PACKAGES_SETTING = "SMSGW_PROVIDER_PACKAGES"


def packages_from(value: str) -> dict[str, Package]:
    """The registry lines a ``SMSGW_PROVIDER_PACKAGES`` value adds: ``name=module`` pairs, comma-separated
    (a provider package installed from elsewhere, or a test's own). A name already registered, a
    malformed pair or a repeated name is refused, naming the variable."""
    from django.core.exceptions import ImproperlyConfigured

    entries: dict[str, Package] = {}
    for raw in value.split(","):
        pair = raw.strip()
        if not pair:
            continue
        name, _, module = (part.strip() for part in pair.partition("="))
        if not _NAME.fullmatch(name) or not _MODULE.fullmatch(module):
            raise ImproperlyConfigured(
                f"{PACKAGES_SETTING}: {pair[:80]!r} is not name=module "
                "(a lower-case name, a dotted module path)"
            )
        if name in PROVIDERS or name in entries:
            raise ImproperlyConfigured(f"{PACKAGES_SETTING}: provider {name!r} is registered twice")
        entries[name] = Package(module)
    return entries


# More provider packages, name=module pairs comma-separated (a provider installed from elsewhere).
PROVIDERS.update(packages_from(os.environ.get(PACKAGES_SETTING, "")))


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
    "PACKAGES_SETTING",
    "PROVIDERS",
    "Package",
    "ProviderQueryError",
    "capabilities",
    "declare_all",
    "get_adapter",
    "packages_from",
    "providers_preload",
    "providers_warm",
    "register",
    "unregister",
]
