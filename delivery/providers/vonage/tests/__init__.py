"""Vonage's own tests: its adapter, its callbacks, its sandbox, and the pipeline through it."""
