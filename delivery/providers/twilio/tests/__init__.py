"""Twilio's own tests: its adapter, its sandbox, and its faults across real processes."""
