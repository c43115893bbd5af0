"""Retry policy: computed in delivery.delays, with every other delay; this import path stays."""

from __future__ import annotations

from delivery.delays import RetryDecision, retry_decide

__all__ = ["RetryDecision", "retry_decide"]
