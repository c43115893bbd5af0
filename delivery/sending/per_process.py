"""One object per process, made on first use: a forked child makes its own (threads do not survive a
fork, so neither does a thread-owning object such as the flight or the reslot thread)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable


class PerProcess[T]:
    def __init__(self) -> None:
        self._value: T | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def get(self, make: Callable[[], T]) -> T:
        """This process's object, made by ``make`` the first time."""
        value = self._value
        if value is None or self._pid != os.getpid():
            with self._lock:
                if self._value is None or self._pid != os.getpid():
                    self._value, self._pid = make(), os.getpid()
                value = self._value
        return value

    def current(self) -> T | None:
        """This process's object if it has made one."""
        return self._value if self._pid == os.getpid() else None
