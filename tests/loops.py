"""Runs a worker loop (``sweep_for``, ``receipts_process_for``) up to its first sleep and records what each
pass returned: the loops' batching tests ask how many passes ran back to back before the loop waited."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest


class _Slept(Exception):
    pass


def passes_until_first_sleep(
    monkeypatch, module: ModuleType, step: str, count: Callable, run: Callable[[], object]
) -> list:
    """``count(result)`` of each call of ``module.<step>`` made by ``run()``, until ``run`` first calls
    ``module.time.sleep`` (which ends it). The step itself runs for real, on the test database."""
    passes: list = []
    real = getattr(module, step)

    def counted(*args, **kwargs):
        result = real(*args, **kwargs)
        passes.append(count(result))
        return result

    def slept(seconds):
        raise _Slept(seconds)

    monkeypatch.setattr(module, step, counted)
    monkeypatch.setattr(module.time, "sleep", slept)
    with pytest.raises(_Slept):
        run()
    return passes
