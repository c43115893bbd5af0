"""Fixtures for the keyword tests: the Twilio sandbox and adapter (tests/delivery/conftest.py's), so a
confirmation is really submitted by the send worker."""

from __future__ import annotations

from tests.delivery.conftest import adapter, sandbox, twilio_settings

__all__ = ["adapter", "sandbox", "twilio_settings"]
