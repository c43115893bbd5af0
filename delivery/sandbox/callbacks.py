"""Status callbacks from the sandbox to the message's ``StatusCallback`` URL.

Not implemented yet (a later issue): this is the single place the server calls when a message was
stored with a ``StatusCallback``. The implementation is expected to schedule, on the running event loop,
POSTs of Twilio's signed status form (``MessageSid``, ``MessageStatus``, ``AccountSid``, ``To``,
``From``, ``ErrorCode``..., header ``X-Twilio-Signature`` computed with the auth token) for the
transitions queued -> sent -> delivered (or failed/undelivered), and update ``message.status`` and
``message.updated_ts`` in the store as it goes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from delivery.sandbox.server import SandboxMessage, SandboxState


class StatusCallbackHook:
    """Receives every stored message that carries a ``StatusCallback``. No-op for now."""

    def __init__(self, state: SandboxState) -> None:
        self.state = state

    def message_accepted(self, message: SandboxMessage) -> None:
        """Called right after ``message`` was stored (before the HTTP answer is written). Must not
        block: schedule work on the loop (``asyncio.get_running_loop().create_task``) instead."""
        return None

    def reset(self) -> None:
        """Called by ``POST /_sandbox/reset``: drop anything scheduled."""
        return None
