"""Twilio's kit (``delivery.providers.kits``): its sandbox in the embedded run and in the test harness.

The sandbox is Twilio's Programmable Messaging API as a real HTTP server (docs/twilio.md, "The sandbox
provider"); the adapter reaches it through ``TWILIO_API_BASE_URL``. In the embedded run it listens on
``SMSGW_SANDBOX_PORT`` (default 8081), keeps its store in the var folder across restarts and posts the
inbound messages ``POST /_sandbox/inbound`` makes to the gateway's ``/inbound/twilio/``.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from delivery.providers.kits import EmbeddedSandbox, gateway_inbound_url

PORT_SETTING = "SMSGW_SANDBOX_PORT"
DEFAULT_PORT = 8081


def _process_class() -> Any:
    from delivery.providers.twilio.sandbox.process import TwilioSandboxProcess

    return TwilioSandboxProcess


def embedded(var_dir: Path, environ: Mapping[str, str]) -> EmbeddedSandbox:
    # The embedded run's Twilio sandbox port (its control API on the same port).
    port = int(environ.get(PORT_SETTING) or DEFAULT_PORT)
    argv = [sys.executable, "-m", _process_class().MODULE, "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--state-file", str(var_dir / "sandbox-messages.jsonl")]
    # Where the sandbox posts incoming messages (its --inbound-url); default: this gateway's /inbound/.
    if not environ.get("SANDBOX_INBOUND_URL"):
        argv += ["--inbound-url", gateway_inbound_url("twilio", environ)]
    url = f"http://127.0.0.1:{port}"
    return EmbeddedSandbox(
        argv=argv,
        ready_url=f"{url}/_sandbox/health",
        gateway_env={"TWILIO_API_BASE_URL": url},
        banner=f"Twilio:   {environ.get('TWILIO_API_BASE_URL') or url}   (sandbox; stats: /_sandbox/stats)",
    )


def sandbox_process(**options: Any) -> Any:
    """The sandbox as a separate process (not started): ``TwilioSandboxProcess``'s options."""
    return _process_class()(**options)


def gateway_env(process: Any) -> dict[str, str]:
    return {
        "TWILIO_API_BASE_URL": process.base_url,
        "TWILIO_ACCOUNT_SID": process.account_sid,
        "TWILIO_AUTH_TOKEN": process.auth_token,
    }


def submitted_to(process: Any) -> Counter:
    """Messages the sandbox stored, by recipient (its public list API, every page)."""
    return Counter(m["to"] for m in process.messages_json())
