"""The sandbox provider and the Twilio adapter pointed at it (tests/delivery/conftest.py), for the
scheduling tests that follow a message to the provider (campaign control)."""

from tests.delivery.conftest import adapter, sandbox, twilio_settings  # noqa: F401 - fixtures
