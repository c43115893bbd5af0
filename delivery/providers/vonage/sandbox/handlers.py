"""The Vonage sandbox's HTTP handlers (``VonageApp``) and its two aiohttp applications: ``build_app``
(Vonage's SMS API and the control API, served over HTTPS) and ``build_control_app`` (the control API
alone, plain HTTP, for ``--control-port``).

Vonage surface (developer.vonage.com/en/api/sms, "Send an SMS"):

* ``POST /sms/json`` with the parameters as a form (what the official SDK sends), as JSON, or in the
  query string; authenticated by ``api_key`` + ``api_secret``, an ``Authorization: Basic`` header, or a
  signature (``api_key``, ``timestamp``, ``sig``). Always HTTP 200 with ``{"message-count": "N",
  "messages": [...]}``: one entry per part with ``status`` "0", or one entry with a non-zero ``status``
  and ``error-text`` (developer.vonage.com/api-errors/sms) when the send is refused, nothing stored.
  Faults: HTTP 500 / 503 with nothing stored, a hang, the ``store_then_*`` answers, an outage.
* No message list and no fetch: Vonage's SMS API has none (its records are in the Reports API).

Control surface (JSON, unauthenticated: bind it to localhost), on the API port and, with
``--control-port``, on a plain-HTTP listener of its own that stays up in every outage mode:
``GET/POST /_sandbox/config``, ``GET /_sandbox/stats``, ``GET /_sandbox/messages`` (``?to=``,
``?client_ref=``), ``GET /_sandbox/messages/{message-id}``, ``POST /_sandbox/callbacks/replay``
(``{"sid": "<message-id>"}`` or ``{"all": true}``), ``POST /_sandbox/reset``, ``GET /_sandbox/health``,
``POST /_sandbox/inbound`` (``{"from", "to", "body", "url"?, "copies"?, "burst"?, "delay_ms"?,
"parts_order"?, "type"?}``: an inbound SMS posted to the account's inbound webhook as Vonage posts it,
``inbound.py``; 202 with the messageIds) and ``GET /_sandbox/inbound`` (``?id=``: each webhook's
deliveries and attempts).

Must not import Django.
"""

from __future__ import annotations

import asyncio
import json
import re
from urllib.parse import parse_qsl

from aiohttp import web

from delivery.providers.vonage.sandbox.config import STORED_ACTIONS
from delivery.providers.vonage.sandbox.state import VonageState
from sandbox.app import SandboxApp
from sandbox.responses import _json

_MSISDN = re.compile(r"[1-9][0-9]{6,14}")
_NUMERIC_SENDER = re.compile(r"[0-9]{1,15}")
_ALPHA_SENDER = re.compile(r"[A-Za-z0-9 ]{1,11}")
MAX_TEXT = 3200  # the sandbox's bound on ``text`` (status 3 beyond it)


async def read_params(request: web.Request) -> dict[str, str] | None:
    """The query string, then the body (a form, or JSON when sent as ``application/json``); None when a
    JSON body is not an object."""
    params = dict(request.query)
    raw = await request.read()
    if request.content_type == "application/json":
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        params.update({str(k): _as_text(v) for k, v in data.items() if v is not None})
    else:
        params.update(parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True))
    return params


def _as_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def validate(params: dict[str, str]) -> int:
    """0, or the status of the first invalid parameter (developer.vonage.com/en/api/sms, the request
    body; the statuses from developer.vonage.com/api-errors/sms)."""
    kind = params.get("type", "text")
    if not params.get("from") or not params.get("to"):
        return 2
    if kind in ("text", "unicode") and not params.get("text"):
        return 2
    if kind not in ("text", "unicode", "binary"):
        return 3
    if kind == "binary" and not (params.get("body") and params.get("udh")):
        return 2
    if not _MSISDN.fullmatch(params["to"].lstrip("+")):
        return 3
    sender = params["from"].lstrip("+")
    if not (_NUMERIC_SENDER.fullmatch(sender) or _ALPHA_SENDER.fullmatch(sender)):
        return 15  # an alphanumeric sender is at most 11 characters
    if len(params.get("text", "")) > MAX_TEXT or len(params.get("client-ref", "")) > 100:
        return 3
    ttl = params.get("ttl")
    if ttl is not None and not (ttl.isascii() and ttl.isdigit() and 20000 <= int(ttl) <= 604800000):
        return 16  # ttl: 20000..604800000 ms (the API reference's bounds)
    callback = params.get("callback", "")
    if callback and not callback.startswith(("http://", "https://")):
        return 23
    if len(callback) > 100:
        return 3
    message_class = params.get("message-class")
    if message_class is not None and message_class not in ("0", "1", "2", "3"):
        return 20
    return 0


def _wants_receipt(params: dict[str, str]) -> bool:
    return params.get("status-report-req", "true").strip().lower() not in ("false", "0", "no")


class VonageApp(SandboxApp):
    """The send handler; the control handlers are the framework's (``sandbox.app``; they read only the state's
    ``config``, ``set_config``, ``stats``, ``messages``, ``debug``, ``callbacks``, ``reset`` and
    ``listeners``)."""

    state: VonageState

    async def send(self, request: web.Request) -> web.Response:
        st = self.state
        if st.api_down:
            if st.config.outage == "refuse" and request.transport is not None:
                request.transport.abort()
            st.outcomes["outage_503"] += 1
            return web.Response(status=503, text="Service Unavailable")
        st.in_flight += 1
        st.max_in_flight = max(st.max_in_flight, st.in_flight)
        try:
            return await self._send(request)
        finally:
            st.in_flight -= 1

    async def _send(self, request: web.Request) -> web.Response:  # noqa: C901 - the answers in order
        st = self.state
        cfg = st.config
        params = await read_params(request)
        if params is None:
            st.outcomes["rejected"] += 1
            return _json(st.reject(3))
        status = st.auth_status(params, request.headers.get("Authorization", ""))
        if status == 0:
            status = validate(params)
        to = params.get("to", "").lstrip("+")
        if status == 0:
            if cfg.account_barred:
                status = 8
            elif to in st.barred:
                status = 7
            elif st.whitelist and to not in st.whitelist:
                status = 29
        if status:
            st.outcomes["rejected"] += 1
            return _json(st.reject(status, to))
        if cfg.latency_ms:
            await asyncio.sleep(cfg.latency_ms / 1000.0)
        fault = st.pick_fault(to)
        action = None if fault is None else fault[0]
        if action == "status":
            st.outcomes["rejected"] += 1
            return _json(st.reject(fault[1]["status"], to))
        if action in ("500", "503"):
            st.outcomes[f"error_{action}"] += 1
            return web.Response(status=int(action), text="Internal Server Error" if action == "500" else "")
        if action == "timeout":
            st.outcomes["timeout"] += 1
            await asyncio.sleep(cfg.timeout_hang_seconds)
            return web.Response(status=503)
        unicode = params.get("type") == "unicode"
        texts, cost = st.cost(params.get("text", "") or params.get("body", ""), unicode)
        if params.get("type") == "binary":
            texts = [params.get("body", "")]
            cost = cfg.price_per_part
        if st.balance < cost - 1e-9:
            st.outcomes["rejected"] += 1
            return _json(st.reject(9, to))  # Partner Quota Violation: not enough credit
        callback = (params.get("callback") or cfg.receipt_url) if _wants_receipt(params) else ""
        vonage_request = st.store(params, to, texts, callback)
        if vonage_request.has_callbacks:
            await st.callbacks.before_response(vonage_request)
        answer = st.answer(vonage_request.parts)
        if action not in STORED_ACTIONS:
            st.outcomes["accepted"] += 1
            return _json(answer)
        st.outcomes[action] += 1
        if action == "accept_then_hang":
            await asyncio.sleep(cfg.timeout_hang_seconds)
            return _json(answer)
        if action in ("store_then_500", "store_then_503"):
            return web.Response(status=int(action[-3:]))
        if request.transport is not None:  # store_then_drop: no answer at all
            request.transport.abort()
        return web.Response(status=500)  # never written

    async def list_messages(self, request: web.Request) -> web.Response:
        query = request.query
        return _json(self.state.list_parts(to=query.get("to"), client_ref=query.get("client_ref")))

    async def health(self, request: web.Request) -> web.Response:
        return _json({"status": "ok", "submissions": self.state.requests, "parts": len(self.state.all)})


def build_app(state: VonageState) -> web.Application:
    handlers = VonageApp(state)  # type: ignore[arg-type]
    app = web.Application(client_max_size=1024 * 1024)
    app["sandbox_state"] = state
    app.on_cleanup.append(state.callbacks.close)
    app.on_cleanup.append(state.inbound.close)
    app.router.add_post("/sms/json", handlers.send)
    _add_control_routes(app, handlers)
    return app


def build_control_app(state: VonageState) -> web.Application:
    app = web.Application(client_max_size=1024 * 1024)
    app["sandbox_state"] = state
    _add_control_routes(app, VonageApp(state))  # type: ignore[arg-type]
    return app


def _add_control_routes(app: web.Application, handlers: VonageApp) -> None:
    app.router.add_get("/_sandbox/config", handlers.get_config, allow_head=False)
    app.router.add_post("/_sandbox/config", handlers.post_config)
    app.router.add_get("/_sandbox/stats", handlers.get_stats, allow_head=False)
    app.router.add_get("/_sandbox/messages", handlers.list_messages, allow_head=False)
    app.router.add_get("/_sandbox/messages/{sid}", handlers.get_message_debug, allow_head=False)
    app.router.add_post("/_sandbox/reset", handlers.post_reset)
    app.router.add_post("/_sandbox/callbacks/replay", handlers.post_callbacks_replay)
    app.router.add_post("/_sandbox/inbound", handlers.post_inbound)
    app.router.add_get("/_sandbox/inbound", handlers.get_inbound, allow_head=False)
    app.router.add_get("/_sandbox/health", handlers.health)
