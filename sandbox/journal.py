"""The sandbox's message store on disk (``--state-file``): one JSON line per accepted message, appended
before the create is answered, read back when the sandbox starts again.

Twilio does not forget a message it answered 201 for. A sandbox that did (its store lived only in its
memory) turned a restart into a provider that lost messages: their status callbacks never came, a
look-up by sid answered 404, and the gateway could only guess. With a journal, a sandbox that was
killed and started again (the embedded run's supervisor restarts it) still has every message it
accepted, with the lifecycle fixed at its create, and sends the status callbacks still owed.

A line is written with one ``write()`` of the whole line to a file opened for appending, before the HTTP
answer: a killed process leaves it in the page cache, so it survives any process death (not a power cut:
no fsync, this is a development server). A last line cut short by a crash mid-write is skipped.
"""

from __future__ import annotations

import base64
import json
import logging
import os

from sandbox.lifecycle import INF, SandboxMessage

logger = logging.getLogger("sandbox")

# Fields written for each message (SandboxMessage's slots); instants are wall-clock seconds.
_FIELDS = (
    "seq",
    "sid",
    "to",
    "sender",
    "from_given",
    "body",
    "messaging_service_sid",
    "created",
    "status_callback",
    "assign_at",
    "release_at",
    "end_at",
    "final_status",
    "error_code",
    "validity_period",
    "has_callbacks",
)


def _encode(value):
    return "inf" if value == INF else value


def _decode(value):
    return INF if value == "inf" else value


class Journal:
    def __init__(self, path: str) -> None:
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - the process's lifetime

    def append(self, message: SandboxMessage) -> None:
        self._file.write(json.dumps(self.encode(message), separators=(",", ":")) + "\n")
        self._file.flush()

    # a provider's journal (sandbox.vonage.journal) overrides these two: one stored item <-> one record
    def encode(self, message: SandboxMessage) -> dict:
        record = {name: _encode(getattr(message, name)) for name in _FIELDS}
        record["raw_form"] = base64.b64encode(message.raw_form).decode()
        return record

    def decode(self, record: dict) -> SandboxMessage:
        return _message(record)

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


def _message(record: dict) -> SandboxMessage:
    message = SandboxMessage(
        record["seq"],
        record["sid"],
        record["to"],
        record["sender"],
        record["from_given"],
        record["body"],
        record["messaging_service_sid"],
        record["created"],
        record["status_callback"],
    )
    for name in ("assign_at", "release_at", "end_at", "final_status", "error_code", "validity_period"):
        setattr(message, name, _decode(record[name]))
    message.has_callbacks = bool(record["has_callbacks"])
    message.raw_form = base64.b64decode(record.get("raw_form") or "")
    return message
