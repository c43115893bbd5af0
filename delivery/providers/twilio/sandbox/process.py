"""Run the Twilio sandbox as a real separate process (tests, the benchmark, the embedded run).

    with TwilioSandboxProcess() as sandbox:
        sandbox.config(latency_ms=50, rules=[{"to": "+15550001111", "action": "429"}])
        sandbox.config(store_then_500_rate=0.01, store_then_drop_rate=0.005, list_lag_seconds=120)
        ...
        sandbox.stats(); sandbox.list_messages(to="+15550001111"); sandbox.reset()
        sandbox.message_info("SM...")  # what the client sent, and the message's timeline

Starting, the control calls and the ports are the framework's (``sandbox.process.SandboxProcess``).
``list_messages`` goes through the twilio SDK's synchronous client with its API domain pointed at the
sandbox (independently of the adapter's own base-URL plumbing).
"""

from __future__ import annotations

import json
import logging
import re
import urllib.request
from typing import Any

from sandbox.process import SandboxProcess

DEFAULT_ACCOUNT_SID = "AC" + "0" * 32
DEFAULT_AUTH_TOKEN = "sandbox-auth-token"
_LISTENING = re.compile(r"sandbox listening on (http://\S+)(?: control (http://\S+))?")


class TwilioSandboxProcess(SandboxProcess):
    MODULE = "delivery.providers.twilio.sandbox"
    LISTENING = _LISTENING
    PORT_ENV = ("SANDBOX_PORT", "SANDBOX_CONTROL_PORT")

    def __init__(
        self, *, account_sid: str = DEFAULT_ACCOUNT_SID, auth_token: str = DEFAULT_AUTH_TOKEN, **launch: Any
    ) -> None:
        """Its credentials; ``launch`` is the framework's (``SandboxProcess``: extra_args, start_timeout,
        host, command_prefix, control_port)."""
        super().__init__(**launch)
        self.account_sid = account_sid
        self.auth_token = auth_token

    def _credential_args(self) -> list[str]:
        return ["--account-sid", self.account_sid, "--auth-token", self.auth_token]

    def submissions(self, since: float = 0.0) -> list[list]:
        """``[created_unix, sender, segments, to]`` for each stored message created at or after ``since``,
        oldest first (``GET /_sandbox/submissions``)."""
        return self._request("GET", f"/_sandbox/submissions?since={since!r}")

    def messages_json(self, page_size: int = 1000) -> list[dict]:
        """Every stored message as Twilio's JSON, through the public list API with Basic auth and paging
        (plain HTTP: tools outside delivery/providers do not import the twilio SDK)."""
        import base64

        credentials = base64.b64encode(f"{self.account_sid}:{self.auth_token}".encode()).decode()
        path = f"/2010-04-01/Accounts/{self.account_sid}/Messages.json?PageSize={page_size}"
        out: list[dict] = []
        while path:
            request = urllib.request.Request(self.base_url + path)  # noqa: S310 - our own sandbox
            request.add_header("Authorization", f"Basic {credentials}")
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                page = json.loads(response.read())
            out += page["messages"]
            path = page.get("next_page_uri") or ""
        return out

    # -- Twilio's API through the official SDK (read-back for the tests; the emulator never uses it) -------
    def client(self) -> Any:
        from twilio.http.http_client import TwilioHttpClient
        from twilio.rest import Client

        quiet = logging.getLogger("sandbox.twilio.client")
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
