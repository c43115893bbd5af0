"""The Vonage sandbox's store on disk (``--state-file``): one JSON line per accepted part, appended before
the send is answered, read back at the next start; the file mechanics are the framework's
(``sandbox.journal``). A sandbox killed and started again (the embedded run's supervisor restarts it)
still holds every part it answered "0" for, and sends the receipts still owed. Must not import Django.
"""

from __future__ import annotations

from delivery.providers.vonage.sandbox.parts import VonagePart
from sandbox.journal import Journal

_FIELDS = (
    "seq",
    "sid",
    "to",
    "sender",
    "text",
    "created",
    "unicode",
    "client_ref",
    "account_ref",
    "status_callback",
    "index",
    "parts",
    "request_id",
    "network",
    "price",
    "end_at",
    "final_status",
    "err_code",
    "form",
    "has_callbacks",
)


class PartJournal(Journal):
    def encode(self, message: VonagePart) -> dict:  # type: ignore[override]
        return {name: getattr(message, name) for name in _FIELDS}

    def decode(self, record: dict) -> VonagePart:  # type: ignore[override]
        part = VonagePart(
            record["seq"], record["sid"], record["to"], record["sender"], record["text"], record["created"]
        )
        for name in _FIELDS[6:]:
            setattr(part, name, record[name])
        return part
