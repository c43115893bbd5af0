"""The fake provider's adapter: its JSON API over HTTP (the standard library's client, a thread per request
in flight), its error table, and its signed form-encoded receipts."""

from __future__ import annotations

import hmac
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from django.conf import settings

from delivery.providers import ProviderQueryError
from delivery.providers.base import (
    HINT_ATTEMPT,
    HINT_MESSAGE,
    LOOKUP_SOURCE,
    NOT_SENT,
    CallbackData,
    CallbackInvalid,
    ErrorClass,
    ErrorInfo,
    Lookup,
    Outcome,
    ProviderAdapter,
    ProviderMessage,
    Scope,
    Submission,
    SubmitResult,
    cut_short,
    elapsed_ms,
    slot_wait_blocking,
)
from tests.fakeprovider.config import CAPABILITIES, SIGNATURE_HEADER, STATUS_MAP, signature

ERRORS = {
    "auth": ErrorInfo(ErrorClass.ACCOUNT_FAULT, "credentials refused", Scope.ACCOUNT),
    "invalid": ErrorInfo(ErrorClass.PERMANENT, "a field is invalid"),
    "too_large": ErrorInfo(ErrorClass.PERMANENT, "the request is too large"),
}
THREADS = 8


class FakeAdapter(ProviderAdapter):
    capabilities = CAPABILITIES
    status_map = STATUS_MAP
    callback_id_fields = ("id",)
    signature_header = SIGNATURE_HEADER

    def __init__(self, name: str | None = None, settings_prefix: str | None = None) -> None:
        super().__init__(name, settings_prefix)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def _reset_process_state(self) -> None:
        self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    @property
    def request_timeout(self) -> float:
        return float(settings.FAKEPROV_TIMEOUT_SECONDS)

    @property
    def account(self) -> str:
        return "fakeprov-account"

    def _request(self, method: str, path: str, payload: dict | None = None) -> tuple[int, dict]:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(settings.FAKEPROV_BASE_URL + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {settings.FAKEPROV_TOKEN}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.request_timeout) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                return exc.code, json.loads(exc.read() or b"{}")
            except ValueError:
                return exc.code, {}

    # -- submitting ---------------------------------------------------------------------------------
    def submit_many(self, submissions: list[Submission]) -> list[SubmitResult]:
        if not submissions:
            return []
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(THREADS, thread_name_prefix=f"{self.name}-submit")
            pool = self._pool
        return list(pool.map(self._submit_safely, submissions))

    def _submit_safely(self, submission: Submission) -> SubmitResult:
        try:
            return self._submit_one(submission)
        except Exception as exc:  # never without an outcome; it may have reached the provider
            return cut_short(exc)

    def _submit_one(self, submission: Submission) -> SubmitResult:
        slot_wait_blocking(submission)
        if submission.given_up():
            return NOT_SENT
        payload = {
            "to": submission.to,
            "from": submission.sender or submission.sender_pool,
            "body": submission.body,
            "callback_url": submission.status_callback,
        }
        started = time.perf_counter()
        try:
            status, data = self._request("POST", "/v1/messages", payload)
        except (TimeoutError, ConnectionResetError) as exc:  # the request may have been taken
            return SubmitResult(outcome=Outcome.UNCERTAIN, error_message=str(exc)[:200], answered=False)
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ConnectionRefusedError):  # nothing listened: certainly not taken
                return SubmitResult(
                    outcome=Outcome.TRANSIENT, error_message="connection refused", answered=False
                )
            return SubmitResult(outcome=Outcome.UNCERTAIN, error_message=str(reason)[:200], answered=False)
        latency = elapsed_ms(started)
        if status == 201 and data.get("id"):
            return SubmitResult(
                outcome=Outcome.ACCEPTED,
                provider_message_id=str(data["id"]),
                provider_status=str(data.get("status", "")),
                http_status=status,
                latency_ms=latency,
                response={"id": str(data["id"]), "status": str(data.get("status", ""))},
            )
        code = str(data.get("code", ""))
        info = self.classify(code, status)
        outcome = Outcome.UNCERTAIN if status >= 500 else Outcome.REJECTED
        return SubmitResult(
            outcome=outcome,
            error_code=code,
            error_message=f"HTTP {status} {code}",
            http_status=status,
            latency_ms=latency,
            error_class=info.error_class,
            error_title=info.title,
            scope=info.scope,
            response={"http_status": status, "code": code},
        )

    # -- look-ups -----------------------------------------------------------------------------------
    def _get_message(self, provider_message_id: str) -> dict | None:
        try:
            status, data = self._request("GET", f"/v1/messages/{provider_message_id}")
        except (OSError, urllib.error.URLError) as exc:
            raise ProviderQueryError(f"fakeprov: {exc}") from None
        if status == 404:
            return None
        if status != 200:
            raise ProviderQueryError(f"fakeprov: HTTP {status}")
        return data

    def fetch(self, provider_message_id: str) -> ProviderMessage | None:
        data = self._get_message(provider_message_id)
        if data is None:
            return None
        return ProviderMessage(
            provider_message_id=str(data["id"]),
            to="",
            from_number="",
            body="",
            status=str(data["status"]),
            date_created=None,
        )

    def fetch_status(self, provider_message_id: str, *, timeout: float) -> CallbackData | None:
        data = self._get_message(provider_message_id)
        if data is None:
            return None
        raw = str(data.get("status", ""))
        return CallbackData(
            provider_message_id=str(data["id"]),
            raw_status=raw,
            normalized_status=self.normalize_status(raw),
            payload={"id": str(data["id"]), "status": raw, "source": LOOKUP_SOURCE},
        )

    def find_submissions(
        self, *, to: str, sender: str, sender_pool: str, created_after: datetime, created_before: datetime
    ) -> Lookup:
        raise ProviderQueryError("fakeprov: no message list (capabilities.lookup_by_recipient)")

    def account_answers(self) -> tuple[bool, str]:
        try:
            status, _ = self._request("GET", "/v1/messages/none")
        except (OSError, urllib.error.URLError) as exc:
            raise ProviderQueryError(f"fakeprov: {exc}") from None
        return (status == 404, "answers" if status == 404 else f"HTTP {status}")

    def probe(self) -> tuple[bool, str]:
        answers, detail = self.account_answers()
        return answers, detail

    # -- errors, statuses and callbacks -------------------------------------------------------------
    def classify(self, error_code: str, http_status: int | None = None) -> ErrorInfo:
        if error_code in ERRORS:
            return ERRORS[error_code]
        if http_status == 429:
            return ErrorInfo(ErrorClass.THROTTLED, "too many requests", Scope.ACCOUNT)
        return ErrorInfo(ErrorClass.TRANSIENT, f"unknown error {error_code or http_status}")

    def validate_callback(self, url: str, params: dict, headers: Mapping[str, str]) -> bool:
        given = headers.get(SIGNATURE_HEADER, "")
        expected = signature(settings.FAKEPROV_SIGNING_SECRET, url, {k: str(v) for k, v in params.items()})
        return bool(given) and hmac.compare_digest(given, expected)

    def parse_callback(self, params: dict, query: dict) -> CallbackData:
        provider_id, raw = str(params.get("id", "")), str(params.get("status", ""))
        if not provider_id:
            raise CallbackInvalid("id", "the receipt has no id")
        attempt = query.get(HINT_ATTEMPT, "")
        return CallbackData(
            provider_message_id=provider_id,
            raw_status=raw,
            normalized_status=self.normalize_status(raw),
            message_hint=str(query.get(HINT_MESSAGE, "")),
            attempt_hint=int(attempt) if str(attempt).isdigit() and len(str(attempt)) < 6 else None,
            payload={"id": provider_id, "status": raw},
        )

    def body_matches(self, sent_body: str, provider_body: str) -> bool:
        return sent_body == provider_body
