"""Retry policy: computed in delivery.sending.delays, with every other delay; this import path stays."""

from __future__ import annotations

from delivery.sending.delays import RetryDecision, retry_decide

__all__ = ["RetryDecision", "retry_decide"]
