"""The Vonage sandbox's command line and ``main``: HTTPS on ``--port`` (Vonage's SMS API and the control
API), optionally plain-HTTP control on ``--control-port``; the listeners are the framework's
(``sandbox.listeners.Listeners``). The first stdout line, once every listener is up, is
``vonage sandbox listening on https://HOST:PORT ca /path/ca.pem`` (and `` control http://HOST:PORT``).
Must not import Django.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal

from delivery.providers.vonage.sandbox.config import (
    DEFAULT_API_KEY,
    DEFAULT_API_SECRET,
    VonageConfig,
)
from delivery.providers.vonage.sandbox.handlers import build_app, build_control_app
from delivery.providers.vonage.sandbox.state import VonageState
from delivery.providers.vonage.sandbox.tls import server_context
from sandbox.cli import _env, _flag_port, add_config_flags, config_from_args
from sandbox.listeners import Listeners

logger = logging.getLogger("sandbox.vonage")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m delivery.providers.vonage.sandbox",
        description="Sandbox SMS provider speaking Vonage's SMS API.",
    )
    p.add_argument("--host", default=_env("VONAGE_SANDBOX_HOST", "127.0.0.1"))
    p.add_argument(
        "--port", type=int, default=int(_env("VONAGE_SANDBOX_PORT", 8082)), help="0 = any free port"
    )
    p.add_argument(
        "--control-port",
        type=_flag_port,
        default=_env("VONAGE_SANDBOX_CONTROL_PORT", None),
        help="also serve /_sandbox/ (plain HTTP) on this port, up in every outage mode; 0 = any free port "
        "(env VONAGE_SANDBOX_CONTROL_PORT)",
    )
    p.add_argument("--api-key", default=_env("VONAGE_API_KEY", DEFAULT_API_KEY))
    p.add_argument("--api-secret", default=_env("VONAGE_API_SECRET", DEFAULT_API_SECRET))
    p.add_argument(
        "--ca-file",
        default=_env("VONAGE_SANDBOX_CA_FILE", None),
        help="write the CA certificate here (default: a new temporary file) (env VONAGE_SANDBOX_CA_FILE)",
    )
    add_config_flags(p, VonageConfig, "VONAGE_SANDBOX_")
    p.add_argument(
        "--rules", default=_env("VONAGE_SANDBOX_RULES", "[]"), help="JSON list (env VONAGE_SANDBOX_RULES)"
    )
    p.add_argument("--seed", type=int, default=_env("VONAGE_SANDBOX_SEED", None))
    p.add_argument("--log-level", default=_env("VONAGE_SANDBOX_LOG_LEVEL", "WARNING"))
    p.add_argument(
        "--state-file",
        default=_env("VONAGE_SANDBOX_STATE_FILE", None),
        help="keep the parts in this file across restarts (journal.py); default: memory only "
        "(env VONAGE_SANDBOX_STATE_FILE)",
    )
    return p.parse_args(argv)


async def serve(
    state: VonageState,
    host: str,
    port: int,
    stop: asyncio.Event,
    control_port: int | None = None,
    ca_file: str | None = None,
) -> None:
    context, ca_path = server_context(host, ca_file)
    listeners = Listeners(
        state,  # type: ignore[arg-type]
        host,
        port,
        control_port,
        api_app=build_app,
        control_app=build_control_app,
        ssl_context=context,
    )
    try:
        await listeners.start()
        line = f"vonage sandbox listening on https://{host}:{listeners.port} ca {ca_path}"
        if listeners.control_port is not None:
            line += f" control http://{host}:{listeners.control_port}"
        print(line, flush=True)
        await stop.wait()
    finally:
        await listeners.cleanup()
        if ca_file is None:
            with contextlib.suppress(OSError):
                os.unlink(ca_path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    config = config_from_args(args, VonageConfig, "vonage sandbox")
    state = VonageState(api_key=args.api_key, api_secret=args.api_secret, config=config, seed=args.seed)
    if args.state_file:
        restored = state.journal_open(args.state_file)
        if restored:
            logger.warning("vonage sandbox: %d parts restored from %s", restored, args.state_file)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        state.journal_callbacks()
        await serve(state, args.host, args.port, stop, args.control_port, args.ca_file)

    asyncio.run(run())
    return 0
