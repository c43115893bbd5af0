"""The sandbox process for tests, plus read-back through the twilio SDK itself (tests may import
twilio; application code outside delivery/providers/ may not)."""

from __future__ import annotations

import logging
from typing import Any

from delivery.providers.twilio.sandbox.process import TwilioSandboxProcess
from sandbox.process import unused_port

__all__ = ["SandboxProcess", "unused_port"]


class SandboxProcess(TwilioSandboxProcess):
    # -- Twilio API through the SDK -----------------------------------------------------------------
    def client(self):
        from twilio.http.http_client import TwilioHttpClient
        from twilio.rest import Client

        quiet = logging.getLogger("tests.sandbox_process.twilio")
        quiet.setLevel(logging.WARNING)  # the SDK logs every request (numbers included) at INFO
        client = Client(self.account_sid, self.auth_token, http_client=TwilioHttpClient(logger=quiet))
        client.edge = client.region = None
        client.api.base_url = self.base_url  # every URL, paging included, is built from this
        return client

    def list_messages(self, to: str | None = None, **filters: Any) -> list:
        """All messages (newest first) via ``client.messages.list``, which follows next_page_uri."""
        if to is not None:
            filters["to"] = to
        return self.client().messages.list(**filters)
