"""The Twilio sandbox's HTTP handlers (``TwilioApp``, over the framework's control handlers,
``sandbox.app.SandboxApp``), the ValidityPeriod parser and the two aiohttp applications: ``build_app``
(Twilio's API and the control API) and ``build_control_app`` (the control API alone).

Twilio surface (HTTP Basic auth ``AccountSid:AuthToken``; every call answers 401/20003 while
``auth_fail`` is set, and 503/20503 while ``outage`` is ``503``; with ``outage`` ``refuse`` its port is
closed):

* ``POST /2010-04-01/Accounts/{AccountSid}/Messages.json`` (form: To, From | MessagingServiceSid, Body,
  StatusCallback, ValidityPeriod, ...) -> 201 message resource, or a Twilio-shaped error; the
  ``store_then_*`` faults store the message and then answer 500/20500, 503/20503 or nothing.
* ``GET /2010-04-01/Accounts/{AccountSid}/Messages/{Sid}.json`` -> the resource or 404 (code 20404).
* ``GET /2010-04-01/Accounts/{AccountSid}/Messages.json`` with ``To``, ``From``, ``DateSent``,
  ``DateSent<``, ``DateSent>`` (a date ``YYYY-MM-DD`` or an ISO datetime, on ``date_sent``), unsent
  messages first (newest first), then by ``date_sent`` newest first, paged with ``PageSize`` (default 50,
  max 1000), ``Page`` and ``PageToken`` exactly as the SDK follows them; with ``list_lag_seconds`` the
  messages created less than that long ago are left out.
* ``GET /2010-04-01/Accounts/{AccountSid}.json`` -> the Account resource (a credentials probe).

Control surface (JSON, unauthenticated: bind it to localhost), on the main port and, with
``--control-port``, on a listener of its own that stays up in every outage mode:

* ``GET/POST /_sandbox/config`` -- fault injection and queue settings (see ``SandboxConfig``); POST merges
  the given keys.
* ``GET /_sandbox/stats`` -- ``{"submissions": stored, "account": {...}, "by_outcome": {...},
  "rejections": {code: n}, "by_status": {...}, "senders": {...}, "callbacks": {"sent", "failed",
  "dropped", "pending", ...}, "callback_results": {"ok", "ct", "rt", "4xx", "5xx"}}``; the most
  submissions and segments in any sliding second per sender and
  for the account (``SlidingWindow``).
* ``GET /_sandbox/submissions?since=<unix seconds>`` -- ``[[created, sender, segments, to], ...]`` of the
  messages created since then, streamed.
* ``GET /_sandbox/messages/{sid}`` -- a message's internals: the form received, ValidityPeriod, its
  assign / release / final instants and its timeline.
* ``POST /_sandbox/callbacks/replay`` -- ``{"sid": "SM..."}`` or ``{"all": true}``: send a message's
  status callbacks that are due so far again (see ``callbacks.py``).
* ``POST /_sandbox/inbound`` -- ``{"from", "to", "body", "url"?, "copies"?, "burst"?, "delay_ms"?,
  "messaging_service_sid"?}``: a recipient's reply, posted to the incoming-message webhook as Twilio
  posts it (``inbound.py``); 202 with the MessageSids. ``GET /_sandbox/inbound`` (``?id=``): each one's
  deliveries, attempts, answers (TwiML) and the replies its ``<Message>`` verbs sent.
* ``POST /_sandbox/reset`` -- clear store and stats, restore the start config.
* ``GET /_sandbox/health`` -- 200.

Must not import Django.
"""

from __future__ import annotations

import asyncio
import math
from urllib.parse import parse_qsl, urlencode

from aiohttp import web

from delivery.providers.twilio.sandbox.config import (
    _DIGITS,
    _E164ISH,
    API_VERSION,
    DEFAULT_PAGE_SIZE,
    MAX_BODY_CHARS,
    MAX_PAGE_SIZE,
    MAX_VALIDITY_PERIOD,
    STORED_ACTIONS,
)
from delivery.providers.twilio.sandbox.lifecycle import SandboxMessage
from delivery.providers.twilio.sandbox.paging import BadRequest, Refused, _parse_date_bound
from delivery.providers.twilio.sandbox.responses import _retry_after_header, _unauthorized, twilio_error
from delivery.providers.twilio.sandbox.state import AUTH_OK, AUTH_REFUSED, SandboxState
from sandbox.app import SandboxApp
from sandbox.responses import _JSON, _json


def _auth_refusal(st: SandboxState, request: web.Request, *, count: bool = False) -> web.Response | None:
    """None when the request may go on; else Twilio's answer: 401/20003 for wrong credentials, 404/20404
    for valid credentials on a URL naming another account (SandboxState.auth_result). ``count``: a
    create's refusal, counted in the stats."""
    result = st.auth_result(request, request.match_info["account_sid"])
    if result == AUTH_OK:
        return None
    if count:
        st.outcomes["unauthorized" if result == AUTH_REFUSED else "other_account"] += 1
        if result == AUTH_REFUSED:
            st.rejections[20003] = st.rejections.get(20003, 0) + 1
    if result == AUTH_REFUSED:
        return _unauthorized()
    return twilio_error(404, 20404, f"The requested resource {request.path} was not found")


def _validity_period(form: dict[str, str]) -> int | None:
    """The ValidityPeriod form field (default 36000), or None when it is not an integer 1..36000."""
    raw = form.get("ValidityPeriod")
    if raw is None:
        return MAX_VALIDITY_PERIOD
    raw = raw.strip()
    if not _DIGITS.fullmatch(raw) or not 1 <= int(raw) <= MAX_VALIDITY_PERIOD:
        return None
    return int(raw)


class TwilioApp(SandboxApp):
    """Twilio's API; the control handlers are the framework's (``sandbox.app``), with the submissions."""

    state: SandboxState

    # -- Twilio API ---------------------------------------------------------------------------------
    async def create_message(self, request: web.Request) -> web.Response:
        st = self.state
        if st.api_down:
            return st.outage_answer(request, create=True)
        cap = st.config.max_concurrent_requests
        if cap and st.in_flight >= cap:
            # Twilio 20429: "your account exceeds allowed concurrency ... Requests that receive 429
            # responses aren't processed" (twilio.com/docs/api/errors/20429). No Twilio source mentions a
            # Retry-After header, so there is none unless concurrency_retry_after_seconds is set.
            st.outcomes["concurrency_limited"] += 1
            seconds = st.config.concurrency_retry_after_seconds
            headers = {"Retry-After": _retry_after_header(seconds)} if seconds > 0 else None
            return st.reject(429, 20429, "Too Many Requests", headers)
        st.in_flight += 1
        if st.in_flight > st.max_in_flight:
            st.max_in_flight = st.in_flight
        transport = request.transport
        if transport is not None:
            st.peers.add(transport.get_extra_info("peername"))
        try:
            return await self._create_message(request)
        finally:
            st.in_flight -= 1

    async def _create_message(self, request: web.Request) -> web.Response:
        st = self.state
        refused = _auth_refusal(st, request, count=True)
        if refused is not None:
            return refused
        raw = await request.read()
        form = dict(parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True))
        to = form.get("To", "").strip()
        from_ = form.get("From", "").strip()
        body = form.get("Body", "")
        service = form.get("MessagingServiceSid", "").strip()
        validity = _validity_period(form)
        error = None
        if not to:
            error = (21604, "A 'To' phone number is required.")
        elif not _E164ISH.fullmatch(to):
            error = (21211, f"The 'To' number {to} is not a valid phone number.")
        elif not from_ and not service:
            error = (21603, "A 'From' phone number is required.")
        elif not body and not form.get("MediaUrl") and not form.get("ContentSid"):
            error = (21602, "Message body is required.")
        elif len(body) > MAX_BODY_CHARS:
            error = (21617, "The concatenated message body exceeds the 1600 character limit.")
        elif validity is None:
            # Twilio 21624 "Invalid validity period value": "Validity period can only be set to integers
            # between 1 and 36,000 seconds (10 hours max)" (twilio.com/docs/api/errors/21624); the same
            # range as twilio-oai CreateMessageRequest, ValidityPeriod
            error = (21624, "Invalid validity period value")
        if error is not None:
            st.outcomes["invalid_request"] += 1
            return st.reject(400, *error)

        cfg = st.config
        if cfg.latency_ms:
            await asyncio.sleep(cfg.latency_ms / 1000.0)
        fault = st.pick_fault(to)
        if fault is None or fault[0] in STORED_ACTIONS:
            try:
                message = st.store(
                    to,
                    from_,
                    body,
                    service,
                    form.get("StatusCallback", ""),
                    validity_period=validity,
                    raw_form=raw,
                )
            except Refused as exc:
                st.outcomes[exc.outcome] += 1
                return st.reject(400, exc.code, exc.message)
            if message.status_callback:  # an "early" callback goes out before this answer
                await st.callbacks.before_response(message)
            return await self._answer_stored(request, message, None if fault is None else fault[0])

        action, rule = fault
        if action == "500":
            st.outcomes["error_500"] += 1
            return st.reject(500, 20500, "An internal server error has occurred")
        if action == "503":
            st.outcomes["error_503"] += 1
            return st.reject(503, 20503, "Service unavailable")
        if action == "429":
            st.outcomes["error_429"] += 1
            seconds = (rule or {}).get("retry_after_seconds", cfg.retry_after_seconds)
            return st.reject(429, 20429, "Too Many Requests", {"Retry-After": _retry_after_header(seconds)})
        if action == "400":
            st.outcomes["error_400"] += 1
            code = (rule or {}).get("error_code", cfg.error_code_400)
            return st.reject(400, code, f"Error {code} (injected by the sandbox)")
        # timeout: nothing stored, the answer comes too late
        st.outcomes["timeout"] += 1
        await asyncio.sleep(cfg.timeout_hang_seconds)
        return st.reject(503, 20503, "Service unavailable")

    async def _answer_stored(
        self, request: web.Request, message: SandboxMessage, action: str | None
    ) -> web.Response:
        """The answer to a create whose message is stored (listed, fetched, sent, its callbacks posted):
        201, or by ``action`` a late 201, an error or none at all."""
        st = self.state
        if action is None:
            st.outcomes["accepted"] += 1
            return _json(st.render(message, initial=True), 201)
        st.outcomes[action] += 1
        if action == "accept_then_hang":  # the provider has it; the client will not hear about it in time
            await asyncio.sleep(st.config.timeout_hang_seconds)
            return _json(st.render(message, initial=True), 201)
        if action == "store_then_500":
            # Twilio 20500: "sending an SMS ... [is] not idempotent. If you get a 500 Server Error on these
            # requests, and you retry the request, it is possible for a customer to receive multiple
            # messages" (twilio.com/docs/api/errors/20500): a 500 does not say the message was not taken
            return st.reject(500, 20500, "An internal server error has occurred")
        if action == "store_then_503":
            # Twilio 20503 "Service unavailable", HTTP 503 (twilio.com/docs/api/errors/20503); like the
            # 500, nothing in it says the request was not processed
            return st.reject(503, 20503, "Service unavailable")
        # store_then_drop: the connection is closed with the message stored and no answer written (a
        # proxy or load balancer dropping the response; the sandbox's own model, no Twilio source)
        transport = request.transport
        if transport is not None:
            transport.abort()
        return web.Response(status=500)  # never written: the connection is gone

    async def fetch_message(self, request: web.Request) -> web.Response:
        st = self.state
        if st.api_down:
            return st.outage_answer(request)
        refused = _auth_refusal(st, request)
        if refused is not None:
            return refused
        message = st.messages.get(request.match_info["sid"])
        if message is None:
            return twilio_error(404, 20404, f"The requested resource {request.path} was not found")
        return _json(st.render(message))

    async def fetch_account(self, request: web.Request) -> web.Response:
        """Twilio's Account fetch (``GET /2010-04-01/Accounts/{Sid}.json``), without ``auth_token``: lets a
        client check its credentials without sending a message."""
        st = self.state
        if st.api_down:
            return st.outage_answer(request)
        refused = _auth_refusal(st, request)
        if refused is not None:
            return refused
        created = st._date(int(st.started))
        path = st.account_path
        return _json(
            {
                "date_created": created,
                "date_updated": created,
                "friendly_name": "Sandbox account",
                "owner_account_sid": st.account_sid,
                "sid": st.account_sid,
                "status": "active",
                "subresource_uris": {
                    "messages": f"{path}/Messages.json",
                    "balance": f"{path}/Balance.json",
                },
                "type": "Trial" if st.config.trial_prefix else "Full",
                "uri": f"{path}.json",
            }
        )

    async def list_messages(self, request: web.Request) -> web.Response:
        st = self.state
        if st.api_down:
            return st.outage_answer(request)
        refused = _auth_refusal(st, request)
        if refused is not None:
            return refused
        q = request.query
        try:
            page_size = int(q.get("PageSize", DEFAULT_PAGE_SIZE))
            page = int(q.get("Page", 0))
        except ValueError:
            return twilio_error(400, 20001, "Invalid Page or PageSize")
        if not 1 <= page_size <= MAX_PAGE_SIZE or page < 0:
            return twilio_error(400, 20001, f"PageSize must be between 1 and {MAX_PAGE_SIZE}")
        filters: list[tuple[str, str]] = []
        lo = hi = None
        try:
            for key in ("DateSent", "DateSent>", "DateSent<"):
                if key not in q:
                    continue
                first, last = _parse_date_bound(key, q[key])
                if key == "DateSent":  # "a specific sent_date": the whole UTC day, even for a datetime
                    first -= first % 86400
                    last = first + 86399
                filters.append((key, q[key]))
                if key != "DateSent<":  # on or after
                    lo = first if lo is None else max(lo, first)
                if key != "DateSent>":  # on or before
                    hi = last if hi is None else min(hi, last)
            to = q.get("To")
            from_ = q.get("From")
            items, next_token, prev_token = st.query(
                to=to,
                from_=from_,
                lo=lo,
                hi=hi,
                page=page,
                page_size=page_size,
                token=q.get("PageToken"),
            )
        except BadRequest as exc:
            return twilio_error(400, exc.code, exc.message)
        if from_ is not None:
            filters.insert(0, ("From", from_))
        if to is not None:
            filters.insert(0, ("To", to))
        path = f"{st.messages_path}.json"

        def page_uri(number: int, token: str | None) -> str:
            params = [*filters, ("PageSize", str(page_size)), ("Page", str(number))]
            if token:
                params.append(("PageToken", token))
            return f"{path}?{urlencode(params)}"

        now = st.clock()
        start = page * page_size
        return _json(
            {
                "messages": [st.render(m, now) for m in items],
                "end": start + max(len(items) - 1, 0),
                "first_page_uri": page_uri(0, None),
                "next_page_uri": page_uri(page + 1, next_token) if next_token else None,
                "page": page,
                "page_size": page_size,
                "previous_page_uri": page_uri(max(page - 1, 0), prev_token) if prev_token else None,
                "start": start,
                "uri": request.path_qs,
            }
        )

    async def get_submissions(self, request: web.Request) -> web.StreamResponse:
        """``[[created_unix, sender, segments, to], ...]`` for the stored messages created at or after
        ``since`` (default 0: all), streamed: creates go on between pieces."""
        try:
            since = float(request.query.get("since", "0"))
        except ValueError:
            since = math.nan
        if math.isnan(since):
            return _json({"error": "since must be a number (unix seconds)"}, 400)
        pieces = self.state.submission_chunks(since)
        first = next(pieces)  # fixes the messages listed
        response = web.StreamResponse(headers={"Content-Type": _JSON})
        await response.prepare(request)
        await response.write(first)
        for piece in pieces:
            await response.write(piece)
            await asyncio.sleep(0)
        await response.write_eof()
        return response


def build_app(state: SandboxState) -> web.Application:
    """The main app: Twilio's API and the control API. Its cleanup closes the status callbacks."""
    handlers = TwilioApp(state)
    app = web.Application(client_max_size=1024 * 1024)
    app["sandbox_state"] = state
    app.on_cleanup.append(state.callbacks.close)
    app.on_cleanup.append(state.inbound.close)
    base = f"/{API_VERSION}/Accounts/{{account_sid}}"
    app.router.add_get(f"{base}.json", handlers.fetch_account, allow_head=False)
    app.router.add_post(f"{base}/Messages.json", handlers.create_message)
    app.router.add_get(f"{base}/Messages.json", handlers.list_messages, allow_head=False)
    app.router.add_get(f"{base}/Messages/{{sid}}.json", handlers.fetch_message, allow_head=False)
    _add_control_routes(app, handlers)
    return app


def build_control_app(state: SandboxState) -> web.Application:
    """The control API alone, for ``--control-port`` (up in every outage mode)."""
    app = web.Application(client_max_size=1024 * 1024)
    app["sandbox_state"] = state
    _add_control_routes(app, TwilioApp(state))
    return app


def _add_control_routes(app: web.Application, handlers: TwilioApp) -> None:
    app.router.add_get("/_sandbox/config", handlers.get_config, allow_head=False)
    app.router.add_post("/_sandbox/config", handlers.post_config)
    app.router.add_get("/_sandbox/stats", handlers.get_stats, allow_head=False)
    app.router.add_get("/_sandbox/messages/{sid}", handlers.get_message_debug, allow_head=False)
    app.router.add_post("/_sandbox/reset", handlers.post_reset)
    app.router.add_post("/_sandbox/callbacks/replay", handlers.post_callbacks_replay)
    app.router.add_post("/_sandbox/inbound", handlers.post_inbound)
    app.router.add_get("/_sandbox/inbound", handlers.get_inbound, allow_head=False)
    app.router.add_get("/_sandbox/health", handlers.health)
    app.router.add_get("/_sandbox/submissions", handlers.get_submissions, allow_head=False)
