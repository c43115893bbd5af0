"""The Twilio sandbox: an aiohttp.web server speaking Twilio's Messages API, plus the control API.

The command line and ``main``; the listeners are the framework's (``sandbox.listeners``), the settings
live in ``config.py``, the store in ``state.py`` (its renders and the Messages list in ``views.py``), the
list query's parsing in ``paging.py``, the Twilio-shaped responses in ``responses.py`` and the HTTP
handlers in ``handlers.py``. Everything lives in this process's memory; the process is the store. Must
not import Django.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal

from delivery.providers.twilio.sandbox.config import (
    DEFAULT_ACCOUNT_SID,
    DEFAULT_AUTH_TOKEN,
    SandboxConfig,
)
from delivery.providers.twilio.sandbox.handlers import build_app, build_control_app
from delivery.providers.twilio.sandbox.lifecycle import SandboxMessage, count_segments, rfc2822
from delivery.providers.twilio.sandbox.paging import BadRequest, Refused  # noqa: F401 - re-exported
from delivery.providers.twilio.sandbox.state import SandboxState
from sandbox.cli import _env, _flag_port, add_config_flags, config_from_args
from sandbox.listeners import Listeners

logger = logging.getLogger("sandbox")

__all__ = [
    "SandboxConfig",
    "SandboxMessage",
    "SandboxState",
    "build_app",
    "count_segments",
    "main",
    "rfc2822",
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m delivery.providers.twilio.sandbox",
        description="Sandbox SMS provider speaking Twilio's API.",
    )
    p.add_argument("--host", default=_env("SANDBOX_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(_env("SANDBOX_PORT", 8081)), help="0 = any free port")
    p.add_argument(
        "--control-port",
        type=_flag_port,
        default=_env("SANDBOX_CONTROL_PORT", None),
        help="also serve /_sandbox/ on this port, up in every outage mode; 0 = any free port; default: "
        "none (the control API only on --port) (env SANDBOX_CONTROL_PORT)",
    )
    p.add_argument("--account-sid", default=_env("TWILIO_ACCOUNT_SID", DEFAULT_ACCOUNT_SID))
    p.add_argument("--auth-token", default=_env("TWILIO_AUTH_TOKEN", DEFAULT_AUTH_TOKEN))
    add_config_flags(p, SandboxConfig, "SANDBOX_")
    p.add_argument("--rules", default=_env("SANDBOX_RULES", "[]"), help="JSON list (env SANDBOX_RULES)")
    p.add_argument("--seed", type=int, default=_env("SANDBOX_SEED", None), help="(env SANDBOX_SEED)")
    p.add_argument("--log-level", default=_env("SANDBOX_LOG_LEVEL", "WARNING"))
    p.add_argument(
        "--state-file",
        default=_env("SANDBOX_STATE_FILE", None),
        help="keep the message store in this file across restarts (journal.py); default: "
        "memory only (env SANDBOX_STATE_FILE)",
    )
    return p.parse_args(argv)


async def serve(
    state: SandboxState, host: str, port: int, stop: asyncio.Event, control_port: int | None = None
) -> None:
    listeners = Listeners(state, host, port, control_port, api_app=build_app, control_app=build_control_app)
    try:
        await listeners.start()
        line = f"sandbox listening on http://{host}:{listeners.port}"
        if listeners.control_port is not None:
            line += f" control http://{host}:{listeners.control_port}"
        print(line, flush=True)  # the first stdout line, once every listener is up
        await stop.wait()
    finally:
        await listeners.cleanup()


FREEZE_SECONDS = 2.0


async def _freeze_stored() -> None:
    """Every stored message lives until the sandbox stops, and Python's full garbage collection walks
    them all: with 100,000 stored, each full pass stopped the event loop for about half a second, and the
    requests that arrived meanwhile were stamped together, a burst the gateway never sent (Twilio's
    machines do not pause our arrivals). What has lived a couple of seconds is moved out of the
    collector's reach (``gc.freeze``, constant time) so a full pass only walks what is new."""
    while True:
        await asyncio.sleep(FREEZE_SECONDS)
        gc.freeze()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    config = config_from_args(args, SandboxConfig, "sandbox")
    state = SandboxState(
        account_sid=args.account_sid, auth_token=args.auth_token, config=config, seed=args.seed
    )
    if args.state_file:
        restored = state.journal_open(args.state_file)
        if restored:
            logger.warning("sandbox: %d messages restored from %s", restored, args.state_file)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        state.journal_callbacks()
        freezer = loop.create_task(_freeze_stored())
        try:
            await serve(state, args.host, args.port, stop, args.control_port)
        finally:
            freezer.cancel()

    asyncio.run(run())
    return 0
