"""The sandbox provider: an aiohttp.web server speaking Twilio's Messages API, plus a control API.

The listeners (``Listeners``: the API port and the optional control port), the command line and
``main``; the settings live in ``config.py``, the store in ``state.py`` (its renders and the Messages
list in ``views.py``), the list query's parsing in ``paging.py``, the Twilio-shaped responses in
``responses.py`` and the HTTP handlers in ``handlers.py``. Everything lives in this process's memory; the
process is the store. Must not import Django.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import signal
import sys
from dataclasses import fields
from typing import Any

from aiohttp import web

# Re-exported: the names this module defined before it was split (``from sandbox.server import ...``).
from sandbox.config import (  # noqa: F401
    _BOOL_KEYS,
    _CHOICE_KEYS,
    _INT_RANGES,
    _LIST_KEYS,
    _STR_KEYS,
    API_VERSION,
    CALLBACK_SHARE_KEYS,
    DEFAULT_ACCOUNT_SID,
    DEFAULT_AUTH_TOKEN,
    DEFAULT_PAGE_SIZE,
    MAX_BODY_CHARS,
    MAX_PAGE_SIZE,
    MAX_VALIDITY_PERIOD,
    MORE_INFO,
    OUTAGE_MODES,
    OUTCOMES,
    RATE_KEYS,
    REFUSE_NEEDS_CONTROL,
    RULE_ACTIONS,
    STORED_ACTIONS,
    SUBMISSIONS_CHUNK,
    SandboxConfig,
    _as_int,
    as_bool,
    as_list,
)
from sandbox.handlers import SandboxApp, build_app, build_control_app  # noqa: F401
from sandbox.lifecycle import SandboxMessage, count_segments, rfc2822
from sandbox.paging import BadRequest, Refused  # noqa: F401
from sandbox.responses import twilio_error  # noqa: F401
from sandbox.state import SandboxState, SlidingWindow  # noqa: F401

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


class Listeners:
    """The server's sockets: the API listener (Twilio's API and the control API, on ``host:port``) and,
    with ``control_port``, a control-only listener that stays up in every outage mode.

    ``outage=refuse`` closes the API listening socket (the port is released: connects get
    ECONNREFUSED) and closes its idle keep-alive connections (one being answered closes after its
    answer). Leaving it binds the same host and port again. The app, the store and the status
    callbacks (outgoing) are untouched throughout."""

    def __init__(
        self,
        state: SandboxState,
        host: str,
        port: int,
        control_port: int | None = None,
        *,
        api_app: Any = build_app,
        control_app: Any = build_control_app,
        ssl_context: Any = None,
    ) -> None:
        # api_app / control_app build the two applications from the state; ssl_context serves the API
        # listener over HTTPS (the Vonage sandbox, sandbox.vonage, reuses these listeners that way)
        self.state = state
        self.host = host
        self.port = port
        self.control_port = control_port
        self.api_app = api_app
        self.control_app = control_app
        self.ssl_context = ssl_context
        self.api_runner: web.AppRunner | None = None
        self.api_site: web.TCPSite | None = None
        self.control_runner: web.AppRunner | None = None

    @property
    def has_control(self) -> bool:
        return self.control_runner is not None

    async def start(self) -> None:
        self.api_runner = _runner(self.api_app(self.state))
        await self.api_runner.setup()
        await self._open_api()
        self.port = self.api_site.port  # the port bound (for --port 0), kept for re-opening
        if self.control_port is not None:
            self.control_runner = _runner(self.control_app(self.state))
            await self.control_runner.setup()
            site = _site(self.control_runner, self.host, self.control_port)
            await site.start()
            self.control_port = site.port
        self.state.listeners = self
        await self.apply(self.state.config.outage)

    async def apply(self, outage: str) -> None:
        if outage == "refuse":
            await self._close_api()
        else:
            await self._open_api()

    async def _open_api(self) -> None:
        if self.api_site is None:
            site = _site(self.api_runner, self.host, self.port, self.ssl_context)
            await site.start()
            self.api_site = site

    async def _close_api(self) -> None:
        site, self.api_site = self.api_site, None
        if site is None:
            return
        await site.stop()  # closes the listening socket: new connections are refused
        for connection in self.api_runner.server.connections:
            if getattr(connection, "_request_in_progress", False):
                connection.close()  # closed once this answer is written (the config call's own, say)
            else:
                # an idle keep-alive connection: closed now. (close() would only cancel its wait for the
                # next request and leave the socket open, unread, in aiohttp 3.14.)
                connection.force_close()

    async def cleanup(self) -> None:
        if self.control_runner is not None:
            await self.control_runner.cleanup()
        if self.api_runner is not None:
            await self.api_runner.cleanup()  # the main app's cleanup closes the status callbacks
        self.state.listeners = None


def _runner(app: web.Application) -> web.AppRunner:
    return web.AppRunner(app, access_log=None, shutdown_timeout=0.5, handle_signals=False)


def _site(runner: web.AppRunner, host: str, port: int, ssl_context: Any = None) -> web.TCPSite:
    return web.TCPSite(runner, host, port, backlog=2048, reuse_address=True, ssl_context=ssl_context)


# --- entry point -----------------------------------------------------------------------------------
def _env(name: str, default: Any) -> Any:
    value = os.environ.get(name)
    return default if value in (None, "") else value


def _flag_bool(value: Any) -> bool:
    try:
        return as_bool("flag", value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _flag_list(value: Any) -> list[str]:
    try:
        return as_list("flag", value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _flag_port(value: Any) -> int | None:
    if value is None or str(value).strip().lower() in ("", "none"):
        return None
    try:
        return _as_int("port", value, 0, 65535)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_config_flags(p: argparse.ArgumentParser, config_cls: type, env_prefix: str) -> None:
    """A ``--flag`` (and env ``<env_prefix>NAME``) per field of a sandbox's config dataclass, typed by the
    key tables of the module that defines it (``_INT_RANGES``, ``_BOOL_KEYS``, ...): the Twilio and the
    Vonage sandbox's command lines alike."""
    keys = sys.modules[config_cls.__module__]
    defaults = config_cls()

    def kind_of(name: str) -> Any:
        if name in keys._INT_RANGES:
            return int
        if name in keys._BOOL_KEYS:
            return _flag_bool
        if name in keys._STR_KEYS or name in keys._CHOICE_KEYS:
            return str
        if name in keys._LIST_KEYS:
            return _flag_list
        return float

    for f in fields(config_cls):
        if f.name == "rules":
            continue
        env = env_prefix + f.name.upper()
        kind = kind_of(f.name)
        p.add_argument(
            "--" + f.name.replace("_", "-"),
            type=kind,
            default=kind(_env(env, getattr(defaults, f.name))),
            help=f"(env {env})" + (" JSON list or comma-separated" if f.name in keys._LIST_KEYS else ""),
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m sandbox", description="Sandbox SMS provider speaking Twilio's API."
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
        help="keep the message store in this file across restarts (sandbox.journal); default: "
        "memory only (env SANDBOX_STATE_FILE)",
    )
    return p.parse_args(argv)


async def serve(
    state: SandboxState, host: str, port: int, stop: asyncio.Event, control_port: int | None = None
) -> None:
    listeners = Listeners(state, host, port, control_port)
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
    try:
        config = SandboxConfig().updated(
            {
                **{f.name: getattr(args, f.name) for f in fields(SandboxConfig) if f.name != "rules"},
                "rules": json.loads(args.rules),
            }
        )
    except ValueError as exc:
        raise SystemExit(f"sandbox: bad configuration: {exc}") from None
    if config.outage == "refuse" and args.control_port is None:
        raise SystemExit(f"sandbox: bad configuration: {REFUSE_NEEDS_CONTROL}")
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
