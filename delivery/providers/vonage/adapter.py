"""The Vonage adapter: the only module (with ``callbacks``, for receipt signatures) that imports the
``vonage`` SDK.

Submissions go through the SDK's ``HttpClient`` (``POST https://{VONAGE_REST_HOST}/sms/json``, a form),
one client per sending thread, on a thread pool of ``SEND_CONCURRENCY``. Each client is built so that ONE
submission is ONE request:

* ``HttpClientOptions(pool_maxsize=1, max_retries=0)``: the SDK resends a request whose connection was
  dropped without an answer up to ``pool_maxsize`` times (``make_request``), and urllib3 would retry by
  ``max_retries``; Vonage may have queued the first one (docs/vonage.md, "The Vonage sandbox").
* The request is posted as ``client.http_client.post(rest_host, "/sms/json", params, auth, "form")``
  rather than ``client.sms.send``: the latter signs the unset fields as ``None`` (a signature Vonage
  cannot match) and turns a non-zero status into an exception without the other parts.
* ``VONAGE_CA_BUNDLE`` is the session's ``verify`` with ``trust_env = False`` (the sandbox's CA).

Outcomes (what Vonage has), then the error table (``errors``) says what to do:

* HTTP 200, every part ``status`` "0" -> ACCEPTED: the first part's ``message-id`` is the
  ``provider_message_id``; every part's id is in ``response["part_ids"]`` (the core has no per-part
  model yet). Some parts "0" and others not -> ACCEPTED too (Vonage queued those parts: a resend would
  send them again), the refused parts in ``response["failed_parts"]``.
* HTTP 200 with a non-zero status -> ``errors.submission_outcome``: TRANSIENT for the throttles (1, 10),
  UNCERTAIN for 5 (internal error), REJECTED otherwise.
* an HTTP error -> ``errors.http_outcome``: TRANSIENT for 429, REJECTED for a refusal before processing
  (401, 403, ...), UNCERTAIN for 5xx, 408 and the rest.
* the request was never written (connection refused, DNS, TLS handshake, connect timeout) -> TRANSIENT;
  it was written but no answer came (read timeout, dropped connection) -> UNCERTAIN.

An UNCERTAIN submission is never resent blind: Vonage's SMS API has no list or fetch, so it is resolved
only by a receipt carrying its ``client-ref`` / callback hint (docs/vonage.md, "Uncertain Vonage
submissions").
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests
from django.conf import settings
from vonage import Auth, HttpClientOptions, Vonage
from vonage_http_client.errors import HttpRequestError

from delivery.providers import ProviderQueryError
from delivery.providers.base import (
    HINT_ATTEMPT,
    HINT_MESSAGE,
    NOT_SENT,
    CallbackData,
    ErrorClass,
    ErrorInfo,
    InboundMessage,
    Lookup,
    Outcome,
    ProviderAdapter,
    ProviderMessage,
    Submission,
    SubmitResult,
    cut_short,
    elapsed_ms,
    redact,
    slot_wait_blocking,
)
from delivery.providers.vonage import callbacks as vonage_callbacks
from delivery.providers.vonage import errors as vonage_errors
from delivery.providers.vonage.config import CAPABILITIES, MAX_REF_CHARS
from smsgw.channels import SMS
from smsgw.values.segments import Encoding

logger = logging.getLogger(__name__)

SEND_PATH = "/sms/json"
HMAC_METHODS = ("md5", "sha1", "sha256", "sha512")

__all__ = ["VonageAdapter"]


# Vonage resends an unanswered inbound message for 24 hours with its first timestamp; an hour of margin.
INBOUND_SIGNATURE_MAX_AGE_SECONDS = 25 * 3600


@dataclass(frozen=True)
class _Conf:
    api_key: str
    api_secret: str
    signature_secret: str
    signature_secret_previous: str
    signature_method: str
    signature_max_age: float
    rest_host: str
    ca_bundle: str
    timeout: float
    concurrency: int

    @classmethod
    def current(cls, prefix: str = "VONAGE") -> _Conf:
        def get(key: str, default: Any = "") -> Any:
            return getattr(settings, f"{prefix}_{key}", getattr(settings, f"VONAGE_{key}", default))

        return cls(
            api_key=get("API_KEY"),
            api_secret=get("API_SECRET"),
            signature_secret=get("SIGNATURE_SECRET"),
            signature_secret_previous=get("SIGNATURE_SECRET_PREVIOUS"),
            signature_method=get("SIGNATURE_METHOD", "md5hash"),
            signature_max_age=float(get("SIGNATURE_MAX_AGE_SECONDS", 300)),
            rest_host=get("REST_HOST", "rest.nexmo.com"),
            ca_bundle=get("CA_BUNDLE"),
            timeout=float(math.ceil(float(get("TIMEOUT_SECONDS", 10.0)))),
            concurrency=max(int(settings.SEND_CONCURRENCY), 1),
        )

    @property
    def signs_requests(self) -> bool:
        # The SDK signs with an HMAC only; with "md5hash" requests authenticate with the api_secret
        # (receipts are still verified with the md5hash scheme, callbacks.validate).
        # During a signature-secret rotation they authenticate with the API secret when there is one:
        # Vonage swaps its one signature secret at once, so a signed request would fail (status 14, an
        # account fault that holds the account) on one side of the swap or the other.
        if self.signature_secret_previous and self.api_secret:
            return False
        return bool(self.signature_secret) and self.signature_method in HMAC_METHODS


def _client(conf: _Conf) -> Vonage:
    auth = Auth(
        api_key=conf.api_key,
        api_secret=None if conf.signs_requests else (conf.api_secret or None),
        signature_secret=conf.signature_secret or None if conf.signs_requests else None,
        signature_method=conf.signature_method if conf.signs_requests else "md5",
    )
    options = HttpClientOptions(
        rest_host=conf.rest_host,
        # Whole seconds (``_Conf.timeout`` is rounded up), never 0 (no timeout). requests applies it to
        # the connect and to each read, not to the whole exchange.
        timeout=max(int(conf.timeout), 1),
        pool_connections=1,
        pool_maxsize=1,  # make_request tries a dropped request pool_maxsize times: once
        max_retries=0,  # and urllib3 never retries on its own
    )
    client = Vonage(auth, options)
    session = client.http_client._session
    session.trust_env = False  # REQUESTS_CA_BUNDLE / proxies from the environment never apply
    if conf.ca_bundle:
        session.verify = conf.ca_bundle
    return client


def _hints(status_callback: str) -> tuple[str, str]:
    """(message ref, attempt) from the callback URL we were given (status_callback_url)."""
    if not status_callback:
        return "", ""
    query = parse_qs(urlsplit(status_callback).query)
    return (
        (query.get(HINT_MESSAGE) or [""])[0],
        (query.get(HINT_ATTEMPT) or [""])[0],
    )


class VonageAdapter(ProviderAdapter):
    name = "vonage"
    settings_prefix = "VONAGE"
    capabilities = CAPABILITIES
    signature_header = "sig"  # a field of the receipt, not a header
    # "Any messages sent to one of your Vonage virtual numbers are sent to your webhook using a GET or
    # POST request" (developer.vonage.com/messaging/sms/guides/inbound-sms).
    inbound_methods = ("GET", "POST")
    status_map = vonage_callbacks.STATUS_MAP
    callback_id_fields = ("messageId", "message-id")
    status_payload_keys = ("messageId", "status", "err-code")

    def _reset_process_state(self) -> None:
        super()._reset_process_state()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0
        self._local = threading.local()

    @property
    def account(self) -> str:
        return _Conf.current(self.settings_prefix).api_key

    @property
    def request_timeout(self) -> float:
        return _Conf.current(self.settings_prefix).timeout

    # -- plumbing -----------------------------------------------------------------------------------
    def _executor(self, size: int) -> ThreadPoolExecutor:
        self._this_process()
        with self._lock:
            if self._pool is None or self._pool_size != size:
                if self._pool is not None:
                    self._pool.shutdown(wait=False)
                self._pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix=f"{self.name}-submit")
                self._pool_size = size
            return self._pool

    def _thread_client(self, conf: _Conf) -> Vonage:
        local = self._local
        if getattr(local, "conf", None) != conf:
            old = getattr(local, "client", None)
            if old is not None:
                with contextlib.suppress(Exception):
                    old.http_client._session.close()
            local.client = _client(conf)
            local.conf = conf
        return local.client

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.shutdown(wait=False)

    @staticmethod
    def preload() -> None:
        import vonage_sms  # noqa: F401

    def warm(self) -> None:
        self._executor(_Conf.current(self.settings_prefix).concurrency)

    # -- submit -------------------------------------------------------------------------------------
    def submit_many(self, submissions: list[Submission]) -> list[SubmitResult]:
        if not submissions:
            return []
        conf = _Conf.current(self.settings_prefix)
        pool = self._executor(conf.concurrency)
        futures = [pool.submit(self._submit_safely, conf, s) for s in submissions]
        try:
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()  # the caller gives up: do not start the queued rest later
            raise

    def _submit_safely(self, conf: _Conf, submission: Submission) -> SubmitResult:
        try:
            return self._submit_one(conf, submission)
        except Exception as exc:  # never without an outcome; it may have reached Vonage
            logger.exception("vonage submission failed unexpectedly")
            return cut_short(exc)

    def client_ref(self, submission: Submission) -> str:
        """Our reference for the attempt, echoed in each of its receipts: "<message ref>.<attempt>"
        (from the callback URL we were given), else the attempt's idempotency token."""
        message_ref, attempt = _hints(submission.status_callback)
        if message_ref and attempt:
            return vonage_callbacks.client_ref(message_ref, int(attempt))[:MAX_REF_CHARS]
        return submission.idempotency_token[:MAX_REF_CHARS]

    def _params(self, submission: Submission, written: dict[str, Any]) -> dict[str, Any]:
        params: dict[str, Any] = {"from": submission.sender, "to": submission.to.lstrip("+")}
        params["text"] = submission.body
        if SMS.cost(submission.body).encoding != Encoding.GSM7.value:
            params["type"] = "unicode"
        ref = self.client_ref(submission)
        if ref:
            params["client-ref"] = ref
        if submission.status_callback:
            if len(submission.status_callback) <= MAX_REF_CHARS:
                params["callback"] = submission.status_callback
            else:
                # Vonage takes at most 100 characters: the account's receipt webhook gets the receipts,
                # which still carry the client-ref.
                written["callback_omitted"] = True
        validity = self.validity_to_send(submission)
        if validity is not None:
            params["ttl"] = validity * 1000  # milliseconds
            written["validity_period"] = validity
        return params

    def _submit_one(self, conf: _Conf, submission: Submission) -> SubmitResult:
        taken = slot_wait_blocking(submission)  # a paced message's slot, or a new one if this one passed
        if submission.given_up():
            return NOT_SENT
        client = self._thread_client(conf)
        written: dict[str, Any] = {}
        params = self._params(submission, written)
        auth_type = "signature" if conf.signs_requests else "basic"
        extra = {"client_ref": params.get("client-ref", ""), **written, **taken.response()}
        started = time.perf_counter()
        requested_at = time.time()
        try:
            data = client.http_client.post(conf.rest_host, SEND_PATH, params, auth_type, "form")
        except HttpRequestError as exc:
            status = exc.response.status_code
            info = vonage_errors.classify("", status)
            outcome = vonage_errors.http_outcome(status)
            retry_after = _retry_after(exc.response.headers.get("Retry-After"))
            return SubmitResult(
                outcome=outcome,
                error_message=f"HTTP {status} from Vonage",
                http_status=status,
                retry_after=retry_after,
                latency_ms=elapsed_ms(started),
                error_class=info.error_class,
                error_title=info.title,
                scope=info.scope,
                validity_period=written.get("validity_period"),
                response={"http_status": status, "error_class": str(info.error_class), **extra},
            )
        except Exception as exc:
            return _from_exception(exc, elapsed_ms(started), written, extra)
        latency = elapsed_ms(started)
        http_status = _last_status(client)
        return _from_answer(data, http_status, latency, requested_at, written, extra)

    # -- look-ups: Vonage's SMS API has none ---------------------------------------------------------
    def fetch(self, provider_message_id: str) -> ProviderMessage | None:
        raise ProviderQueryError("vonage: the SMS API cannot fetch a message (capabilities.fetch_by_id)")

    def fetch_status(self, provider_message_id: str, *, timeout: float) -> CallbackData | None:
        raise ProviderQueryError("vonage: the SMS API has no status look-up (capabilities.fetch_by_id)")

    def find_submissions(
        self,
        *,
        to: str,
        sender: str,
        sender_pool: str,
        created_after: datetime,
        created_before: datetime,
    ) -> Lookup:
        raise ProviderQueryError("vonage: the SMS API has no message list (capabilities.lookup_by_recipient)")

    def account_answers(self) -> tuple[bool, str]:
        raise ProviderQueryError("vonage: no look-up to answer (the SMS API has no message list)")

    def probe(self) -> tuple[bool, str]:
        """Sends nothing, so it can only say whether credentials are configured: Vonage's SMS API has
        no read-only call (a bad key shows as status 4 on the first submission, an account fault)."""
        conf = _Conf.current(self.settings_prefix)
        if not conf.api_key or not (conf.api_secret or conf.signature_secret):
            return False, "no credentials configured"
        return True, "credentials configured (not verified: the SMS API has no read-only call)"

    # -- errors, statuses and callbacks -------------------------------------------------------------
    def classify(self, error_code: str, http_status: int | None = None) -> ErrorInfo:
        return vonage_errors.classify(error_code, http_status)

    def validate_callback(self, url: str, params: dict, headers: Mapping[str, str]) -> bool:
        conf = _Conf.current(self.settings_prefix)
        return vonage_callbacks.validate(
            params,
            api_key=conf.api_key,
            secret=conf.signature_secret,
            previous_secret=conf.signature_secret_previous,
            method=conf.signature_method,
            max_age=conf.signature_max_age,
        )

    def validate_inbound(self, url: str, params: dict, headers: Mapping[str, str]) -> bool:
        # An inbound message not answered 200 or 204 is sent again "for the next 24 hours", and every
        # attempt carries the same ``timestamp``: "the unix timestamp representation of
        # message-timestamp", the time "Vonage started to push this inbound message"
        # (developer.vonage.com/messaging/sms/guides/inbound-sms). The receipts' five-minute window
        # would refuse every retry after the fifth minute, so the message would be lost. A replay inside
        # the longer window names the same messageId: a duplicate, stored once (inbound.intake).
        conf = _Conf.current(self.settings_prefix)
        return vonage_callbacks.validate(
            params,
            api_key=conf.api_key,
            secret=conf.signature_secret,
            previous_secret=conf.signature_secret_previous,
            method=conf.signature_method,
            max_age=max(conf.signature_max_age, INBOUND_SIGNATURE_MAX_AGE_SECONDS),
        )

    def callback_replay_key(self, params: dict) -> tuple[str, float] | None:
        conf = _Conf.current(self.settings_prefix)
        key = vonage_callbacks.replay_key(params)
        if not conf.signature_secret or not key:
            return None
        # Remembered past both edges of the window: a timestamp up to max_age ahead of our clock is
        # still taken max_age from now.
        return key, 2 * conf.signature_max_age

    def parse_inbound(self, params: dict) -> InboundMessage:
        return vonage_callbacks.parse_inbound(params)

    def parse_callback(self, params: dict, query: dict) -> CallbackData:
        return vonage_callbacks.parse(params, query)

    def body_matches(self, sent_body: str, provider_body: str) -> bool:
        return sent_body == provider_body  # never asked: there is no listing to match against


def _last_status(client: Vonage) -> int | None:
    response = client.http_client._last_response
    return None if response is None else int(response.status_code)


def _retry_after(value: str | None) -> float | None:
    try:
        seconds = float((value or "").strip())
    except ValueError:
        return None
    return max(seconds, 0.0) if seconds == seconds and seconds != float("inf") else None


def _not_written(exc: BaseException) -> bool:
    """Did the request certainly never leave (no connection, no TLS session)?"""
    if isinstance(exc, requests.exceptions.ConnectTimeout | requests.exceptions.SSLError):
        return True
    if isinstance(exc, requests.exceptions.ProxyError):
        return True
    if isinstance(exc, requests.exceptions.ConnectionError):
        text = repr(exc.args)
        return any(
            marker in text
            for marker in (
                "NewConnectionError",
                "NameResolutionError",
                "Connection refused",
                "Failed to resolve",
            )
        )
    return False


def _from_exception(exc: Exception, latency_ms: float, written: dict, extra: dict) -> SubmitResult:
    transient = _not_written(exc)
    text = str(exc)[:300]
    message = redact(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)
    return SubmitResult(
        outcome=Outcome.TRANSIENT if transient else Outcome.UNCERTAIN,
        error_message=message,
        latency_ms=latency_ms,
        error_class=ErrorClass.TRANSIENT if transient else None,
        error_title="network error before the request was sent" if transient else "",
        validity_period=None if transient else written.get("validity_period"),
        response={"exception": type(exc).__name__, "request_sent": not transient, **extra},
    )


def _from_answer(
    data: Any, http_status: int | None, latency_ms: float, requested_at: float, written: dict, extra: dict
) -> SubmitResult:
    def unreadable(why: str) -> SubmitResult:  # an answer that does not say whether it was taken
        return SubmitResult(
            outcome=Outcome.UNCERTAIN,
            error_message=why,
            http_status=http_status,
            latency_ms=latency_ms,
            validity_period=written.get("validity_period"),
            response={"http_status": http_status, **extra},
        )

    messages = data.get("messages") if isinstance(data, dict) else None
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return unreadable("an answer without messages")
    accepted = [m for m in messages if str(m.get("status", "")).strip() == "0"]
    refused = [m for m in messages if str(m.get("status", "")).strip() != "0"]
    if accepted:
        part_ids = [str(m.get("message-id") or "") for m in accepted]
        if not part_ids[0]:
            return unreadable("success answer without a message-id")
        response = {
            "http_status": http_status,
            "message_count": str(data.get("message-count", "")),
            # every part's id (one receipt each); the core keeps only the first as the message's id
            "part_ids": part_ids,
            "remaining_balance": str(accepted[-1].get("remaining-balance", "")),
            "message_price": str(sum(_float(m.get("message-price")) for m in accepted)),
            "network": str(accepted[0].get("network", "")),
            "requested_at": round(requested_at, 4),
            **extra,
        }
        if refused:
            response["failed_parts"] = [
                {"status": str(m.get("status", "")), "error_text": str(m.get("error-text", ""))[:200]}
                for m in refused
            ]
        return SubmitResult(
            outcome=Outcome.ACCEPTED,
            provider_message_id=part_ids[0],
            provider_status="0",
            http_status=http_status,
            latency_ms=latency_ms,
            validity_period=written.get("validity_period"),
            response=response,
        )
    first = refused[0]
    status = str(first.get("status", "")).strip()
    info = vonage_errors.classify(status, http_status or 200)
    outcome = vonage_errors.submission_outcome(status, info)
    text = redact(str(first.get("error-text", ""))[:300])
    return SubmitResult(
        outcome=outcome,
        provider_status=status,
        error_code=status,
        error_message=text,
        http_status=http_status,
        latency_ms=latency_ms,
        error_class=info.error_class,
        error_title=info.title,
        scope=info.scope,
        validity_period=written.get("validity_period"),
        response={
            "http_status": http_status,
            "status": status,
            "error_text": text,
            "error_class": str(info.error_class),
            **extra,
        },
    )


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0
