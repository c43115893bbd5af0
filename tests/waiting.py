"""The one way tests wait: for a condition, with a deadline. Never a fixed sleep: a test must neither pass
without its event happening nor fail because a loaded machine made it late."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

_pause = threading.Event()  # never set: its wait() is the pause between two looks


def wait_for(predicate: Callable[[], object], timeout: float, what: str, *, interval: float = 0.05) -> object:
    """Return the predicate's first truthy value; TimeoutError naming ``what`` after ``timeout`` seconds.
    An exception the predicate raises counts as "not yet" (a server still starting) until the deadline,
    when it propagates."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except Exception:
            if time.monotonic() >= deadline:
                raise
        else:
            if value:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        _pause.wait(interval)
