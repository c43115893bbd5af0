"""A sandbox's store on disk (``--state-file``): one JSON line per stored item, appended before the
request that stored it is answered, read back when the sandbox starts again. A provider's journal
subclasses ``Journal`` with the record of one item (``encode`` / ``decode``).

A provider does not forget a message it accepted. A sandbox that did (its store lived only in its memory)
turned a restart into a provider that lost messages: their callbacks never came, a look-up answered
404, and the gateway could only guess. With a journal, a sandbox that was killed and started again (the
embedded run's supervisor restarts it) still has every item it accepted and sends the callbacks still
owed.

A line is written with one ``write()`` of the whole line to a file opened for appending, before the HTTP
answer: a killed process leaves it in the page cache, so it survives any process death (not a power cut:
no fsync, this is a development server). A last line cut short by a crash mid-write is skipped. Must not
import Django.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

logger = logging.getLogger("sandbox")


class Journal:
    def __init__(self, path: str) -> None:
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - the process's lifetime

    def append(self, message: Any) -> None:
        self._file.write(json.dumps(self.encode(message), separators=(",", ":")) + "\n")
        self._file.flush()

    # a provider's journal supplies these two: one stored item <-> one record
    def encode(self, message: Any) -> dict:
        raise NotImplementedError

    def decode(self, record: dict) -> Any:
        raise NotImplementedError

    def truncate(self) -> None:
        self._file.truncate(0)
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def load(self) -> list:
        messages: list = []
        with open(self.path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                try:
                    record = json.loads(line)
                    messages.append(self.decode(record))
                except (ValueError, KeyError, TypeError):
                    logger.warning(
                        "sandbox journal: line %d unreadable (cut short by a crash?); skipped", number
                    )
        return messages
