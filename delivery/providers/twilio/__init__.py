"""Twilio: the adapter over the official SDK, its HTTP client, its error table and its status callbacks.

What the core asks of a provider package (``smsgw.config.providers``): ``CAPABILITIES``,
``load_settings`` (this package's ``TWILIO_*`` settings, in ``config``) and ``create_adapter``. Importing
this module imports neither the SDK nor Django's settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from delivery.providers.twilio.config import CAPABILITIES, load_settings

if TYPE_CHECKING:
    from delivery.providers.base import ProviderAdapter


def create_adapter(name: str) -> ProviderAdapter:
    from delivery.providers.twilio.adapter import TwilioAdapter

    return TwilioAdapter(name=name)


__all__ = ["CAPABILITIES", "create_adapter", "load_settings"]
