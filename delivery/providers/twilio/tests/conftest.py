"""Twilio's tests use the delivery tests' fixtures: one sandbox process per module, the Twilio adapter
pointed at it by settings."""

from tests.delivery.conftest import adapter, sandbox, twilio_settings

__all__ = ["adapter", "sandbox", "twilio_settings"]
