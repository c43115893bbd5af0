"""A provider's kit: what the tooling needs from a provider package besides its adapter.

A provider package (``delivery/providers/<name>/``, registered by its line in ``PROVIDERS``) carries its
sandbox (an emulator of the provider's API, a real server its real adapter talks to), its tests
(``<name>/tests/``, collected with the suite) and a ``kit`` module that says how to run that sandbox:

- ``embedded(var_dir, environ) -> EmbeddedSandbox``: the command the embedded run's supervisor
  (``deploy/embedded.py``) starts, the URL that answers once it is ready, the environment the gateway's
  processes need to reach it (an operator's own value of a variable wins), and its banner line; its
  inbound messages (``POST /_sandbox/inbound``) go to ``gateway_inbound_url(name, environ)``. Its
  ports come from the package's own ``SMSGW_*_PORT`` variables, with defaults that do not collide with
  another kit's.
- ``sandbox_process(**options)``: the sandbox as a separate process for the test harness (a context
  manager, not yet started), with a signing secret of its own where the provider signs its callbacks;
- ``gateway_env(process) -> dict``: what the gateway's processes need to send through that process and
  verify its callbacks (base URL or host, credentials, CA, signature secret);
- ``submitted_to(process) -> Counter``: submissions by recipient (E.164), as the sandbox stored them (a
  long message once).

The supervisor and the harness (``tests/harness.py``) read ``kits()`` instead of naming a provider: a
provider whose package has no ``kit`` module has no sandbox, and neither starts one for it. A kit module
imports no sandbox and no SDK at import time (the supervisor imports it before anything runs).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from delivery.providers import PROVIDERS, Package


@dataclass(frozen=True)
class EmbeddedSandbox:
    """One provider's sandbox in the embedded run."""

    argv: list[str]  # the command (sys.executable -m <its sandbox module> ...)
    ready_url: str  # answers 200 once it serves
    gateway_env: Mapping[str, str] = field(default_factory=dict)  # defaults for the gateway's processes
    banner: str = ""  # one line for the run's banner: where it listens, where its stats are


def gateway_inbound_url(provider: str, environ: Mapping[str, str]) -> str:
    """The gateway's incoming-message webhook for ``provider`` in the embedded run: its public base URL
    (SMSGW_PUBLIC_BASE_URL, which deploy/run-embedded.sh sets, else the web port's) + /inbound/<name>/."""
    # The embedded run's web port (deploy/run-embedded.sh, default 8000).
    base = environ.get("SMSGW_PUBLIC_BASE_URL") or f"http://127.0.0.1:{environ.get('SMSGW_WEB_PORT') or 8000}"
    return f"{base.rstrip('/')}/inbound/{provider}/"


def kit_module(name: str) -> ModuleType | None:
    """The ``kit`` module of registered provider ``name``'s package, or None when it has none."""
    factory = PROVIDERS.get(name)
    if not isinstance(factory, Package):
        return None
    path = f"{factory.module}.kit"
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError as exc:
        if exc.name == path:
            return None
        raise


def kits() -> dict[str, ModuleType]:
    """Every registered provider with a kit, in the registry's order (the default provider first)."""
    found = {name: kit_module(name) for name in PROVIDERS}
    return {name: module for name, module in found.items() if module is not None}


def embedded_sandboxes(var_dir: Path, environ: Mapping[str, str]) -> dict[str, EmbeddedSandbox]:
    """Each kit's sandbox for the embedded run, by provider name."""
    return {name: kit.embedded(var_dir, environ) for name, kit in kits().items()}


def main(argv: list[str] | None = None) -> int:
    """``python -m delivery.providers.kits embedded VAR_DIR``: every kit's embedded sandbox as JSON, for the
    supervisor (deploy/run-embedded.sh hands it over; the supervisor imports nothing of the project)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "embedded":
        print("usage: python -m delivery.providers.kits embedded VAR_DIR", file=sys.stderr)
        return 2
    listed = [
        {"provider": name, **dataclasses.asdict(sandbox)}
        for name, sandbox in embedded_sandboxes(Path(args[1]), os.environ).items()
    ]
    print(json.dumps(listed, default=dict))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

__all__ = ["EmbeddedSandbox", "embedded_sandboxes", "gateway_inbound_url", "kit_module", "kits", "main"]
