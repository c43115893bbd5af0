"""Twilio's sandbox process, under the name the delivery tests have always used."""

from __future__ import annotations

from delivery.providers.twilio.sandbox.process import TwilioSandboxProcess as SandboxProcess
from sandbox.process import unused_port

__all__ = ["SandboxProcess", "unused_port"]
