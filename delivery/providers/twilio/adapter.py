"""The Twilio adapter: the only module (with its ``twilio_*`` helpers) that imports the ``twilio`` SDK.

Submissions go through the SDK's asyncio client (its request API for the Messages resource,
``api.v2010.create_async``; see ``_AsyncRuntime.create_message``) on ONE private event loop per process,
run by a daemon thread, with ONE aiohttp session (connection pool) on it; ``submit_many`` is synchronous
for the caller and may be called from any thread. Look-ups (``fetch``,
``find_submissions``, ``probe``) use the SDK's synchronous client.

The API is reached by base URL only: both HTTP clients replace the ``https://api.twilio.com`` prefix of
every request URL with ``settings.TWILIO_API_BASE_URL`` (which may be Twilio itself). Settings are read
at every call; when they change, the clients are rebuilt.

Outcomes (what the provider has), then the error table (``twilio_errors``) says what to do:

* 2xx -> ACCEPTED (sid, status).
* an error answer -> ``twilio_errors.submission_outcome``: TRANSIENT only where Twilio documents that it
  did not process the request (429; a 4xx whose code a resend may get past, such as 21611), REJECTED for
  any other 4xx (permanent, opted out, account fault), UNCERTAIN for everything else (500, 503, any 5xx,
  408, an unreadable 2xx), which may hide a stored message.
* the request was never written (connection refused, DNS, connect timeout, no free connection)
  -> TRANSIENT; it was written but no response came back (read timeout, reset, disconnect) -> UNCERTAIN.
  "Written" is observed when aiohttp starts writing the request on an open connection (twilio_http). An
  uncertain request's socket is reset, never closed gracefully (``twilio_http``), so nothing of it can
  reach Twilio after we gave up.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from twilio.base.exceptions import TwilioRestException
from twilio.rest import Client

from delivery.providers import ProviderQueryError
from delivery.providers.base import (
    LOOKUP_SOURCE,
    NOT_SENT,
    CallbackData,
    ErrorInfo,
    InboundMessage,
    Lookup,
    Outcome,
    ProviderAdapter,
    ProviderMessage,
    ResultCallback,
    Submission,
    SubmitResult,
    cut_short,
    elapsed_ms,
    redact,
    slot_wait,
)
from delivery.providers.twilio import callbacks as twilio_callbacks
from delivery.providers.twilio import errors as twilio_errors
from delivery.providers.twilio.client import (
    _AsyncRuntime,
    _client,
    _Conf,
    _error_payload,
    _from_exception,
    _provider_message,
    _setting,
    _utc,
    parse_retry_after,
)
from delivery.providers.twilio.config import CAPABILITIES
from delivery.providers.twilio.http import (
    BaseUrlHttpClient,
    Call,
    current_call,
    rewrite_url,
    start_loop_thread,
)
from smsgw.values.phone import mask

logger = logging.getLogger(__name__)

LIST_PAGE_SIZE = 1000  # Twilio's maximum PageSize


__all__ = ["TwilioAdapter", "parse_retry_after", "redact", "rewrite_url"]


class TwilioAdapter(ProviderAdapter):
    name = "twilio"
    settings_prefix = "TWILIO"
    capabilities = CAPABILITIES
    signature_header = "X-Twilio-Signature"
    free_text_fields = twilio_callbacks.FREE_TEXT_FIELDS
    status_map = twilio_callbacks.STATUS_MAP
    callback_id_fields = ("MessageSid", "SmsSid")
    status_payload_keys = ("MessageSid", "MessageStatus", "ErrorCode")

    def _reset_process_state(self) -> None:
        # after a fork the parent's loop thread does not exist here: start over (without closing what
        # belongs to the parent's sockets)
        super()._reset_process_state()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runtime: _AsyncRuntime | None = None
        self._sync_conf: _Conf | None = None
        self._sync_client: Client | None = None
        self._lookup_conf: _Conf | None = None
        self._lookup_client: Client | None = None

    @property
    def account(self) -> str:
        return _setting(self.settings_prefix, "ACCOUNT_SID")

    @property
    def request_timeout(self) -> float:
        return float(_setting(self.settings_prefix, "TIMEOUT_SECONDS"))

    # -- plumbing -----------------------------------------------------------------------------------
    def _ensure_runtime(self, conf: _Conf) -> _AsyncRuntime:
        self._this_process()
        with self._lock:
            if self._loop is None or self._thread is None or not self._thread.is_alive():
                self._loop, self._thread = start_loop_thread()
                self._runtime = None
            runtime = self._runtime
            if runtime is None or runtime.conf != conf:
                if runtime is not None:  # settings changed: let the old pool go
                    asyncio.run_coroutine_threadsafe(runtime.http.close(), self._loop)
                runtime = self._runtime = _AsyncRuntime(conf, self._loop)
            return runtime

    def _sync(self) -> Client:
        conf = _Conf.current(self.settings_prefix)
        self._this_process()
        with self._lock:
            if self._sync_client is None or self._sync_conf != conf:
                http = BaseUrlHttpClient(base_url=conf.base_url, timeout=conf.timeout)
                self._sync_client = _client(conf, http)
                self._sync_conf = conf
            return self._sync_client

    def _status_client(self, timeout: float) -> Client:
        # Its own client: status look-ups use a shorter timeout than reconciliation's ``fetch``, and
        # sharing one client would rebuild it at every switch.
        conf = dataclasses.replace(_Conf.current(self.settings_prefix), timeout=timeout)
        self._this_process()
        with self._lock:
            if self._lookup_client is None or self._lookup_conf != conf:
                http = BaseUrlHttpClient(base_url=conf.base_url, timeout=conf.timeout)
                self._lookup_client = _client(conf, http)
                self._lookup_conf = conf
            return self._lookup_client

    def close(self) -> None:
        """Close the pool and stop the loop thread (also run at exit). The adapter stays usable: the
        next call starts them again."""
        with self._lock:
            loop, thread, runtime = self._loop, self._thread, self._runtime
            self._loop = self._thread = self._runtime = None
        if loop is None or thread is None or not thread.is_alive() or self._pid != os.getpid():
            return
        if runtime is not None:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(runtime.http.close(), loop).result(timeout=2)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=2)

    # -- submit -------------------------------------------------------------------------------------
    @staticmethod
    def preload() -> None:
        # The SDK imports a resource's modules on first use (client.messages): done here, in a worker's
        # parent before it forks, they are not imported again by every child on its first batch.
        import twilio.rest.api.v2010.account.message  # noqa: F401

    def warm(self) -> None:
        self._ensure_runtime(_Conf.current(self.settings_prefix))

    def submit_many(self, submissions: list[Submission]) -> list[SubmitResult]:
        if not submissions:
            return []
        runtime = self._ensure_runtime(_Conf.current(self.settings_prefix))
        future = asyncio.run_coroutine_threadsafe(self._submit_all(runtime, submissions), runtime.loop)
        try:
            return future.result()
        except BaseException:
            # the caller is giving up (e.g. a task time limit): do not start the queued rest later
            future.cancel()
            raise

    async def _submit_all(self, runtime: _AsyncRuntime, submissions: list[Submission]) -> list[SubmitResult]:
        return list(await asyncio.gather(*(self._submit_one(runtime, s) for s in submissions)))

    def submit_each(self, submissions: list[Submission], on_result: ResultCallback) -> None:
        if not submissions:
            return
        runtime = self._ensure_runtime(_Conf.current(self.settings_prefix))
        runtime.loop.call_soon_threadsafe(self._spawn, runtime, submissions, on_result)

    def _spawn(
        self, runtime: _AsyncRuntime, submissions: list[Submission], on_result: ResultCallback
    ) -> None:
        for index, submission in enumerate(submissions):
            task = runtime.loop.create_task(self._submit_reporting(runtime, index, submission, on_result))
            runtime.tasks.add(task)  # a reference until done: the loop keeps only weak ones
            task.add_done_callback(runtime.tasks.discard)

    async def _submit_reporting(
        self, runtime: _AsyncRuntime, index: int, submission: Submission, on_result: ResultCallback
    ) -> None:
        try:
            result = await self._submit_one(runtime, submission)
        except BaseException as exc:
            on_result(index, cut_short(exc))  # the loop stopping: it may have reached Twilio
            raise
        on_result(index, result)

    async def _submit_one(self, runtime: _AsyncRuntime, submission: Submission) -> SubmitResult:
        written: dict[str, Any] = {}
        result = await self._submit_request(runtime, submission, written)
        return dataclasses.replace(result, validity_period=written.get("validity_period"))

    async def _submit_request(
        self, runtime: _AsyncRuntime, submission: Submission, written: dict[str, Any]
    ) -> SubmitResult:
        """``written``: what the request carried that its caller records (its validity period)."""
        # A paced message goes at its slot (what the provider counts is each sender's spacing), or at a
        # new one when this process woke up too late for it.
        taken = await slot_wait(submission)
        if submission.given_up():
            return NOT_SENT
        async with runtime.semaphore:
            call = Call()
            current_call.set(call)  # this coroutine runs in its own task, hence its own context
            # The Message resource's create parameters (twilio-oai, api_v2010 CreateMessage), as the SDK's
            # messages.create_async names them when it builds the same form.
            data: dict[str, Any] = {"To": submission.to, "Body": submission.body}
            if submission.sender:
                data["From"] = submission.sender
            if submission.sender_pool:
                data["MessagingServiceSid"] = submission.sender_pool
            if submission.status_callback:
                data["StatusCallback"] = submission.status_callback
            # Twilio's default keeps a message queued for 10 h; ours ends at expires_at.
            validity = self.validity_to_send(submission)
            if validity is not None:
                data["ValidityPeriod"] = written["validity_period"] = validity
            # Twilio's Messages API has no idempotency key: submission.idempotency_token is not sent;
            # duplicates after an UNCERTAIN outcome are prevented by reconciling (find_submissions).
            started = time.perf_counter()
            requested_at = time.time()  # when the request left: the timeline's "provider got it"
            try:
                payload = await runtime.create_message(data)
            except TwilioRestException as exc:
                return self._from_error_response(exc, call, elapsed_ms(started))
            except Exception as exc:
                return _from_exception(exc, call, elapsed_ms(started))
            sid = str(payload.get("sid") or "")
            status = str(payload.get("status") or "")
            if not sid:  # a 2xx without a sid: it was (probably) taken, but we cannot track it
                return SubmitResult(
                    outcome=Outcome.UNCERTAIN,
                    error_message="success response without a message sid",
                    http_status=call.status,
                    latency_ms=elapsed_ms(started),
                    response={"http_status": call.status},
                )
            return SubmitResult(
                outcome=Outcome.ACCEPTED,
                provider_message_id=sid,
                provider_status=status,
                http_status=call.status,
                latency_ms=elapsed_ms(started),
                response={
                    "http_status": call.status,
                    "sid": sid,
                    "status": status,
                    "num_segments": payload.get("num_segments"),
                    "requested_at": round(requested_at, 4),
                    # A paced message's slot (delivery.flow.pacing): how late the request left for it.
                    **taken.response(),
                },
            )

    def _from_error_response(self, exc: TwilioRestException, call: Call, latency_ms: float) -> SubmitResult:
        status = int(call.status or exc.status or 0)
        payload = _error_payload(call.text)
        code = payload.get("code", exc.code)
        error_code = "" if code in (None, "", status) else str(code)
        message = redact(str(payload.get("message") or exc.msg or ""))
        retry_after = parse_retry_after(call.headers.get("Retry-After"))
        info = self.classify(error_code, status)
        outcome = twilio_errors.submission_outcome(status, info)
        return SubmitResult(
            outcome=outcome,
            error_code=error_code,
            error_message=message,
            http_status=status or None,
            retry_after=retry_after,
            latency_ms=latency_ms,
            error_class=info.error_class,
            error_title=info.title,
            scope=info.scope,
            response={
                "http_status": status or None,
                "error_code": error_code,
                "error_message": message,
                "error_class": str(info.error_class),
                **({"retry_after": retry_after} if retry_after is not None else {}),
            },
        )

    # -- look-ups -----------------------------------------------------------------------------------
    def fetch(self, provider_message_id: str) -> ProviderMessage | None:
        client = self._sync()
        try:
            message = client.messages(provider_message_id).fetch()
        except TwilioRestException as exc:
            if exc.status == 404:
                return None  # Twilio positively says: no such message
            raise ProviderQueryError(f"twilio fetch failed: HTTP {exc.status} code {exc.code}") from exc
        except Exception as exc:
            raise ProviderQueryError(f"twilio fetch failed: {type(exc).__name__}") from exc
        return _provider_message(message)

    def fetch_status(self, provider_message_id: str, *, timeout: float) -> CallbackData | None:
        # Message fetch: GET /2010-04-01/Accounts/{AccountSid}/Messages/{Sid}.json (twilio-oai
        # spec/json/twilio_api_v2010.json, FetchMessage); ``status`` is one of message_enum_status
        # (queued, sending, sent, failed, delivered, undelivered, receiving, received, accepted,
        # scheduled, read, partially_delivered, canceled), ``date_updated`` when it last changed.
        client = self._status_client(timeout)
        try:
            m = client.messages(provider_message_id).fetch()
        except TwilioRestException as exc:
            if exc.status == 404:
                return None
            raise ProviderQueryError(
                f"twilio status lookup failed: HTTP {exc.status} code {exc.code}"
            ) from exc
        except Exception as exc:
            raise ProviderQueryError(f"twilio status lookup failed: {type(exc).__name__}") from exc
        raw = str(m.status or "")
        code = "" if m.error_code in (None, "", 0) else str(m.error_code)
        return CallbackData(
            provider_message_id=m.sid or provider_message_id,
            raw_status=raw,
            normalized_status=self.normalize_status(raw),
            error_code=code,
            # When the status last changed: the delivery time for a final one (the processor checks it
            # against what it knows, as it does a carrier's RawDlrDoneDate).
            done_at=_utc(m.date_updated) if m.date_updated else None,
            payload={
                "source": LOOKUP_SOURCE,
                "MessageSid": m.sid or provider_message_id,
                "MessageStatus": raw,
                "ErrorCode": code,
                "To": mask(m.to or ""),
            },
        )

    def find_submissions(
        self,
        *,
        to: str,
        sender: str,
        sender_pool: str,
        created_after: datetime,
        created_before: datetime,
    ) -> Lookup:
        """List by ``To`` only and filter the rest here. Why not Twilio's filters:

        * ``DateSent`` filters ``date_sent``, which describes when Twilio sent the message: a message
          still ``accepted``/``queued`` at Twilio (exactly the one a timed-out burst leaves behind) has
          not been sent and would be missed. Twilio has no ``DateCreated`` filter (twilio-oai
          ``ListMessage``), so the creation window is checked on our side.
        * ``From`` is null while a Messaging Service picks a sender (``accepted``), so a service
          submission would be missed by a ``From`` filter; it is matched by ``messaging_service_sid``.

        Twilio sorts by ``DateSent``, newest first, and does not say where unsent messages go, so the
        listing cannot stop early at the window: it reads up to SMSGW_RECONCILE_MAX_PAGES pages of
        1,000 and says whether it reached the end (``complete``); an incomplete listing never proves
        absence."""
        created_after = _utc(created_after).replace(microsecond=0)  # Twilio's dates have whole seconds
        created_before = _utc(created_before)
        max_pages = int(settings.RECONCILE_MAX_PAGES)
        client = self._sync()
        query = {
            "to": mask(to),
            "from": sender or None,
            "messaging_service_sid": sender_pool or None,
            "created_after": created_after.isoformat(),
            "created_before": created_before.isoformat(),
        }
        out: list[ProviderMessage] = []
        pages = scanned = 0
        complete = False
        try:
            page = client.messages.page(to=to, page_size=LIST_PAGE_SIZE)
            while page is not None:
                pages += 1
                for m in page:
                    scanned += 1
                    if m.to != to:
                        continue
                    if sender:
                        if m.from_ != sender:
                            continue
                    elif sender_pool and m.messaging_service_sid != sender_pool:
                        continue
                    if m.date_created is None or not (created_after <= m.date_created <= created_before):
                        continue
                    out.append(_provider_message(m))
                if not page.next_page_url:
                    complete = True
                    break
                if pages >= max_pages:
                    break
                page = page.next_page()
        except TwilioRestException as exc:
            raise ProviderQueryError(f"twilio list failed: HTTP {exc.status} code {exc.code}") from exc
        except Exception as exc:
            raise ProviderQueryError(f"twilio list failed: {type(exc).__name__}") from exc
        return Lookup(candidates=out, complete=complete, pages=pages, scanned=scanned, query=query)

    def probe(self) -> tuple[bool, str]:
        """Fetch the account resource: it answers 401/20003 while the credentials are wrong and shows the
        account's status (active, suspended, closed). No message is spent on it."""
        client = self._sync()
        try:
            account = client.api.v2010.accounts(self.account).fetch()
        except TwilioRestException as exc:
            return False, f"HTTP {exc.status} code {exc.code}"
        except Exception as exc:
            return False, f"network: {type(exc).__name__}"
        status = str(account.status or "")
        return status in ("", "active"), f"account status {status or 'unknown'}"

    def account_answers(self) -> tuple[bool, str]:
        """Does the account itself answer (GET /2010-04-01/Accounts/{AccountSid}.json)? Asked before a
        404 on a message fetch is believed: a wrong account SID or base URL answers 404 for a message
        that exists. (False, why) for a refusal (401, 403, 404, or an account not active); raises
        ProviderQueryError when Twilio cannot answer at all (network, 5xx, 429), which proves nothing."""
        client = self._sync()
        try:
            account = client.api.v2010.accounts(self.account).fetch()
        except TwilioRestException as exc:
            if exc.status in (401, 403, 404):
                return False, f"HTTP {exc.status} code {exc.code}"
            raise ProviderQueryError(
                f"twilio account fetch failed: HTTP {exc.status} code {exc.code}"
            ) from exc
        except Exception as exc:
            raise ProviderQueryError(f"twilio account fetch failed: {type(exc).__name__}") from exc
        status = str(account.status or "")
        return status in ("", "active"), f"account status {status or 'unknown'}"

    # -- errors, statuses and callbacks -------------------------------------------------------------
    def classify(self, error_code: str, http_status: int | None = None) -> ErrorInfo:
        return twilio_errors.classify(error_code, http_status)

    def validate_callback(self, url: str, params: dict, headers: Mapping[str, str]) -> bool:
        return twilio_callbacks.validate(
            url,
            params,
            headers,
            auth_token=_setting(self.settings_prefix, "AUTH_TOKEN"),
            shared_keys=_setting(self.settings_prefix, "WEBHOOK_SHARED_KEYS"),
            previous_auth_token=_setting(self.settings_prefix, "AUTH_TOKEN_PREVIOUS"),
        )

    def parse_callback(self, params: dict, query: dict) -> CallbackData:
        return twilio_callbacks.parse(params, query)

    def parse_inbound(self, params: dict) -> InboundMessage:
        return twilio_callbacks.parse_inbound(params)

    def inbound_reply(self) -> tuple[str, str]:
        return '<?xml version="1.0" encoding="UTF-8"?><Response></Response>', "text/xml"  # empty TwiML

    def body_matches(self, sent_body: str, provider_body: str) -> bool:
        return twilio_callbacks.body_matches(sent_body, provider_body)
