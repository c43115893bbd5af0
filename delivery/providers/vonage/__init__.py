"""Vonage: the adapter over the official SDK (``vonage``, pinned), its error table and its delivery receipts.

What the core asks of a provider package (``smsgw.config.providers``): ``CAPABILITIES``,
``load_settings`` (this package's ``VONAGE_*`` settings, in ``config``) and ``create_adapter``. Importing
this module imports neither the SDK nor Django's settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from delivery.providers.vonage.config import CAPABILITIES, load_settings

if TYPE_CHECKING:
    from delivery.providers.base import ProviderAdapter


def create_adapter(name: str) -> ProviderAdapter:
    from delivery.providers.vonage.adapter import VonageAdapter

    return VonageAdapter(name=name)


__all__ = ["CAPABILITIES", "create_adapter", "load_settings"]
