"""Vonage's kit (``delivery.providers.kits``): its sandbox in the embedded run and in the test harness.

The sandbox is Vonage's SMS API as a real HTTPS server with a throwaway CA (docs/vonage.md, "The Vonage
sandbox"): the official SDK only speaks https://, so the adapter reaches it through ``VONAGE_REST_HOST``
and trusts ``VONAGE_CA_BUNDLE``. Its control API (health, stats) is plain HTTP on a port of its own. In
the embedded run it listens on ``SMSGW_VONAGE_SANDBOX_PORT`` (default 8082), its control API on
``SMSGW_VONAGE_SANDBOX_CONTROL_PORT`` (default the next port), the CA is written to the var folder and
its store kept there across restarts; the inbound messages ``POST /_sandbox/inbound`` makes go to the
gateway's ``/inbound/vonage/``. In the harness it signs its receipts (and checks signed requests)
with a secret the gateway is given too, as a production account would.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from delivery.providers.kits import EmbeddedSandbox, gateway_inbound_url

PORT_SETTING = "SMSGW_VONAGE_SANDBOX_PORT"
CONTROL_PORT_SETTING = "SMSGW_VONAGE_SANDBOX_CONTROL_PORT"
DEFAULT_PORT = 8082
# The secret both sides share in the harness: the sandbox signs its receipts with it, the gateway checks
# every receipt's ``sig`` (VONAGE_SIGNATURE_SECRET).
SIGNATURE_SECRET = "integration-signature-secret"
SIGNATURE_METHOD = "sha256"


def _process_class() -> Any:
    from delivery.providers.vonage.sandbox.process import VonageSandboxProcess

    return VonageSandboxProcess


def embedded(var_dir: Path, environ: Mapping[str, str]) -> EmbeddedSandbox:
    # The embedded run's Vonage sandbox: its HTTPS port.
    port = int(environ.get(PORT_SETTING) or DEFAULT_PORT)
    # Its control API (stats, faults, inbound), plain HTTP (default: the next port).
    control = int(environ.get(CONTROL_PORT_SETTING) or port + 1)
    ca_file = environ.get("VONAGE_CA_BUNDLE") or str(var_dir / "vonage-sandbox-ca.pem")
    argv = [sys.executable, "-m", _process_class().MODULE, "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--control-port", str(control), "--ca-file", ca_file]
    argv += ["--state-file", str(var_dir / "vonage-sandbox-messages.jsonl")]
    # Where the sandbox posts incoming messages (its --inbound-url); default: this gateway's /inbound/.
    if not environ.get("VONAGE_SANDBOX_INBOUND_URL"):
        argv += ["--inbound-url", gateway_inbound_url("vonage", environ)]
    rest_host = environ.get("VONAGE_REST_HOST") or f"127.0.0.1:{port}"
    stats = f"http://127.0.0.1:{control}/_sandbox/stats"
    return EmbeddedSandbox(
        argv=argv,
        ready_url=f"http://127.0.0.1:{control}/_sandbox/health",
        gateway_env={"VONAGE_REST_HOST": f"127.0.0.1:{port}", "VONAGE_CA_BUNDLE": ca_file},
        banner=f"Vonage:   https://{rest_host}   (sandbox; CA {ca_file}; stats: {stats})",
    )


def sandbox_process(**options: Any) -> Any:
    """The sandbox as a separate process (not started), signing with the harness's secret; the options
    are ``VonageSandboxProcess``'s (``extra_args`` are added after the signing flags)."""
    signing = ["--signature-secret", SIGNATURE_SECRET, "--signature-method", SIGNATURE_METHOD]
    options["extra_args"] = [*signing, *options.get("extra_args", ())]
    return _process_class()(**options)


def gateway_env(process: Any) -> dict[str, str]:
    return {
        "VONAGE_REST_HOST": process.rest_host,
        "VONAGE_CA_BUNDLE": process.ca_file,
        "VONAGE_API_KEY": process.api_key,
        "VONAGE_API_SECRET": process.api_secret,
        "VONAGE_SIGNATURE_SECRET": SIGNATURE_SECRET,
        "VONAGE_SIGNATURE_METHOD": SIGNATURE_METHOD,
    }


def submitted_to(process: Any) -> Counter:
    """Submissions (requests stored: a long message once, by its first part) by recipient, in E.164 (the
    sandbox keeps Vonage's MSISDN, without the +)."""
    return Counter(f"+{p['to']}" for p in process.messages() if p["part"] == 1)
