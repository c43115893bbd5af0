"""The Twilio sandbox's message store on disk (``--state-file``): one JSON line per accepted message,
appended before the create is answered, read back when the sandbox starts again; the file mechanics are
the framework's (``sandbox.journal``).

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

from delivery.providers.twilio.sandbox.lifecycle import INF, SandboxMessage
from sandbox.journal import Journal

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


class MessageJournal(Journal):
    """The Twilio sandbox's record of a message: its fields (``_FIELDS``) and the form it received."""

    def encode(self, message: SandboxMessage) -> dict:  # type: ignore[override]
        record = {name: _encode(getattr(message, name)) for name in _FIELDS}
        record["raw_form"] = base64.b64encode(message.raw_form).decode()
        return record

    def decode(self, record: dict) -> SandboxMessage:  # type: ignore[override]
        return _message(record)


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
