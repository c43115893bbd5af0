"""A sandbox's listeners (``Listeners``): the API port and the optional control-only port, and the
``refuse`` outage that closes the API port and opens it again. Must not import Django.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web


class Listeners:
    """The server's sockets: the API listener (the provider's API and the control API, on ``host:port``) and,
    with ``control_port``, a control-only listener that stays up in every outage mode.

    ``outage=refuse`` closes the API listening socket (the port is released: connects get
    ECONNREFUSED) and closes its idle keep-alive connections (one being answered closes after its
    answer). Leaving it binds the same host and port again. The app, the store and the status
    callbacks (outgoing) are untouched throughout."""

    def __init__(
        self,
        state: Any,
        host: str,
        port: int,
        control_port: int | None = None,
        *,
        api_app: Any,
        control_app: Any,
        ssl_context: Any = None,
    ) -> None:
        # api_app / control_app build the two applications from the state; ssl_context serves the API
        # listener over HTTPS (for an SDK that speaks only https://)
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
