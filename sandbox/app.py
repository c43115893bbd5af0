"""The control API's handlers, which every sandbox serves under ``/_sandbox/`` (JSON, unauthenticated:
bind it to localhost), on its API port and, with ``--control-port``, on a listener of its own that stays
up in every outage mode: ``SandboxApp``, which a provider's handlers subclass with its API.

* ``GET/POST /_sandbox/config``: the config (POST merges the given keys); ``outage`` opens or closes
  the API listener before the answer.
* ``GET /_sandbox/stats``, ``GET /_sandbox/messages/{sid}`` (one stored item's internals).
* ``POST /_sandbox/callbacks/replay``: ``{"sid": ...}`` or ``{"all": true}`` (``sandbox.callbacks``).
* ``POST /_sandbox/inbound``: a recipient's reply, sent to the gateway's incoming-message webhook as the
  provider sends it (``sandbox.inbound``): 202 with the ids made; ``GET /_sandbox/inbound`` (``?id=``)
  lists each webhook's deliveries and attempts.
* ``POST /_sandbox/reset``: clear the store and the stats, restore the start config.
* ``GET /_sandbox/health``: 200.

The state a handler reads gives ``config`` (with ``updated`` and ``to_json``), ``set_config``,
``listeners``, ``stats()``, ``messages``, ``debug(item)``, ``callbacks``, ``inbound`` (an
``InboundSender``), ``reset()`` and ``all``. Must not
import Django.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from sandbox.config import REFUSE_NEEDS_CONTROL
from sandbox.inbound import AskError
from sandbox.responses import _json


class SandboxApp:
    def __init__(self, state: Any) -> None:
        self.state = state

    # -- control API --------------------------------------------------------------------------------
    async def get_config(self, request: web.Request) -> web.Response:
        return _json(self.state.config.to_json())

    async def post_config(self, request: web.Request) -> web.Response:
        st = self.state
        try:
            changes = await request.json()
            config = st.config.updated(changes)
        except (ValueError, TypeError) as exc:
            return _json({"error": str(exc)}, 400)
        if config.outage == "refuse" and (st.listeners is None or not st.listeners.has_control):
            return _json({"error": REFUSE_NEEDS_CONTROL}, 400)
        st.set_config(config)
        error = await self._apply_outage()
        if error is not None:
            return error
        return _json(st.config.to_json())

    async def _apply_outage(self) -> web.Response | None:
        """Open or close the API listener for ``outage`` before answering, so that the next call sees
        the new state. None, or a 500 when the API port could not be bound again (left ``refuse``)."""
        st = self.state
        if st.listeners is None:
            return None
        try:
            await st.listeners.apply(st.config.outage)
        except OSError as exc:
            st.set_config(st.config.updated({"outage": "refuse"}))
            return _json({"error": f"could not listen on the API port again: {exc}"}, 500)
        return None

    async def get_stats(self, request: web.Request) -> web.Response:
        return _json(self.state.stats())

    async def get_message_debug(self, request: web.Request) -> web.Response:
        message = self.state.messages.get(request.match_info["sid"])
        if message is None:
            return _json({"error": "no such message"}, 404)
        return _json(self.state.debug(message))

    async def post_callbacks_replay(self, request: web.Request) -> web.Response:
        try:
            payload = await request.json()
        except ValueError:
            payload = None
        if not isinstance(payload, dict) or not (payload.get("all") is True or payload.get("sid")):
            return _json({"error": 'expected {"sid": "SM..."} or {"all": true}'}, 400)
        if payload.get("all") is True:
            result = self.state.callbacks.replay(everything=True)
        else:
            result = self.state.callbacks.replay(sid=str(payload["sid"]))
        if result is None:
            return _json({"error": "no such message with status callbacks"}, 404)
        return _json(result)

    async def post_inbound(self, request: web.Request) -> web.Response:
        try:
            payload = await request.json()
        except ValueError:
            return _json({"error": "body: expected a JSON object", "field": "body"}, 400)
        try:
            answer = self.state.inbound.submit(payload)
        except AskError as exc:
            return _json({"error": str(exc), "field": exc.field}, 400)
        return _json(answer, 202)

    async def get_inbound(self, request: web.Request) -> web.Response:
        return _json({"inbound": self.state.inbound.listing(request.query.get("id"))})

    async def post_reset(self, request: web.Request) -> web.Response:
        self.state.reset()
        error = await self._apply_outage()
        if error is not None:
            return error
        return _json({"reset": True, "config": self.state.config.to_json()})

    async def health(self, request: web.Request) -> web.Response:
        return _json({"status": "ok", "submissions": len(self.state.all)})
