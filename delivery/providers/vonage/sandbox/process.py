"""Run the Vonage sandbox as a real separate process (tests, the benchmark, the embedded run).

    with VonageSandboxProcess() as vonage:
        vonage.rest_host      # "127.0.0.1:PORT": HttpClientOptions(rest_host=...) of the official SDK
        vonage.ca_file        # the CA to trust: requests' verify=, or REQUESTS_CA_BUNDLE
        vonage.config(throttled_rate=0.1, rules=[{"to": "447700900001", "action": "status", "status": 9}])
        vonage.stats(); vonage.messages(to="447700900001"); vonage.message_info("0A00..."); vonage.reset()

Started with ``--port 0``; the first stdout line gives the port and the CA file. With ``control_port``
(0: any free port) the control API is also served, plain HTTP, on a port of its own that stays up in
every outage mode, and every control call goes there.
"""

from __future__ import annotations

import re
import ssl
from typing import Any
from urllib.parse import urlencode

from delivery.providers.vonage.sandbox.config import DEFAULT_API_KEY, DEFAULT_API_SECRET
from sandbox.process import SandboxProcess

_LISTENING = re.compile(r"vonage sandbox listening on (https://\S+) ca (\S+)(?: control (http://\S+))?")


class VonageSandboxProcess(SandboxProcess):
    MODULE = "delivery.providers.vonage.sandbox"
    LISTENING = _LISTENING
    PORT_ENV = ("VONAGE_SANDBOX_PORT", "VONAGE_SANDBOX_CONTROL_PORT", "VONAGE_SANDBOX_CA_FILE")

    def __init__(
        self, *, api_key: str = DEFAULT_API_KEY, api_secret: str = DEFAULT_API_SECRET, **launch: Any
    ) -> None:
        """Its credentials; ``launch`` is the framework's (``SandboxProcess``: extra_args, start_timeout,
        host, command_prefix, control_port)."""
        super().__init__(**launch)
        self.api_key = api_key
        self.api_secret = api_secret
        self.ca_file = ""
        self.rest_host = ""  # host:port, what the SDK's HttpClientOptions(rest_host=...) takes
        self._ssl: ssl.SSLContext | None = None

    def _credential_args(self) -> list[str]:
        return ["--api-key", self.api_key, "--api-secret", self.api_secret]

    def _read_banner(self, match: re.Match) -> None:
        self.base_url = match.group(1)
        self.ca_file = match.group(2)
        self.control_url = match.group(3) or self.base_url
        self.rest_host = self.base_url.removeprefix("https://")
        self._ssl = ssl.create_default_context(cafile=self.ca_file)

    def _urlopen_context(self) -> Any:
        return self._ssl if self.control_url.startswith("https://") else None

    def messages(self, to: str | None = None, client_ref: str | None = None) -> list[dict]:
        """Every stored part (``GET /_sandbox/messages``), oldest first, optionally for one recipient or
        one client-ref."""
        query = {k: v for k, v in (("to", to), ("client_ref", client_ref)) if v is not None}
        return self._request("GET", "/_sandbox/messages" + ("?" + urlencode(query) if query else ""))

    def submissions(self, since: float = 0.0) -> list[list]:
        raise NotImplementedError("the Vonage sandbox has no /_sandbox/submissions; use messages()")

    def messages_json(self, page_size: int = 1000) -> list[dict]:
        raise NotImplementedError("Vonage's SMS API has no message list; use messages()")
