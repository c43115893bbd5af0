"""The fake provider's kit (``delivery.providers.kits``): its sandbox in the embedded run and in the test
harness. In the embedded run it listens on ``SMSGW_FAKEPROV_SANDBOX_PORT`` (default 8090)."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from delivery.providers.kits import EmbeddedSandbox

PORT_SETTING = "SMSGW_FAKEPROV_SANDBOX_PORT"
DEFAULT_PORT = 8090
MODULE = "tests.fakeprovider.sandbox"


def embedded(var_dir: Path, environ: Mapping[str, str]) -> EmbeddedSandbox:
    port = int(environ.get(PORT_SETTING) or DEFAULT_PORT)
    url = f"http://127.0.0.1:{port}"
    return EmbeddedSandbox(
        argv=[sys.executable, "-m", MODULE, "--host", "127.0.0.1", "--port", str(port)],
        ready_url=f"{url}/_sandbox/health",
        gateway_env={"FAKEPROV_BASE_URL": url},
        banner=f"Fakeprov: {url}   (sandbox; stats: /_sandbox/stats)",
    )


def sandbox_process(**options: Any) -> Any:
    from tests.fakeprovider.sandbox.process import FakeSandboxProcess

    return FakeSandboxProcess(**options)


def gateway_env(process: Any) -> dict[str, str]:
    return {
        "FAKEPROV_BASE_URL": process.base_url,
        "FAKEPROV_TOKEN": process.token,
        "FAKEPROV_SIGNING_SECRET": process.secret,
    }


def submitted_to(process: Any) -> Counter:
    return Counter(m["to"] for m in process.messages())
