"""A fake third HTTP provider, as one package with its whole kit: what ``tests/delivery/providers/
test_provider_kit.py`` registers to show that a new provider touches no file outside its own folder.

Like ``delivery/providers/<name>/``, it declares what the core may ask of it (``CAPABILITIES``,
``load_settings``, ``create_adapter``), and carries its adapter (``adapter.py``: a JSON API over HTTP,
``FAKEPROV_*`` settings), its sandbox (``sandbox/``: a real HTTP server the adapter talks to, which posts
signed delivery receipts back), its kit (``kit.py``: how the embedded run and the test harness start that
sandbox) and its own tests (``tests/``). It is registered by one line: ``SMSGW_PROVIDER_PACKAGES=
fakeprov=tests.fakeprovider`` (or ``delivery.providers.register`` in a test's own process).
Importing this module imports neither Django's settings nor the adapter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.fakeprovider.config import CAPABILITIES, load_settings

if TYPE_CHECKING:
    from delivery.providers.base import ProviderAdapter


def create_adapter(name: str) -> ProviderAdapter:
    from tests.fakeprovider.adapter import FakeAdapter

    return FakeAdapter(name=name)


__all__ = ["CAPABILITIES", "create_adapter", "load_settings"]
