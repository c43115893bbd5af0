"""The fake provider's API as a real HTTP server (the standard library's, one thread per request).

- ``POST /v1/messages`` (JSON ``to``, ``from``, ``body``, ``callback_url``, ``Authorization: Bearer
  <token>``): stores the message and answers 201 ``{"id", "status": "accepted"}``; a wrong token is a 401
  ``{"code": "auth"}``, a missing field a 400 ``{"code": "invalid", "field"}``. Then, in the background,
  it posts a signed ``delivered`` receipt to ``callback_url`` (form-encoded ``id``, ``status``,
  ``X-Fakeprov-Signature``), retrying a refused or failed post a few times.
- ``GET /v1/messages/<id>``: the message's status (404 ``{"code": "not_found"}`` when unknown).
- ``GET /_sandbox/health``, ``GET /_sandbox/messages`` (every stored message), ``GET /_sandbox/stats``.

It prints one line when it listens: ``fakeprov sandbox listening on http://HOST:PORT``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlencode

from tests.fakeprovider.config import DEFAULT_SECRET, DEFAULT_TOKEN, FORM, SIGNATURE_HEADER, signature

RECEIPT_TRIES = 5
MAX_REQUEST_BYTES = 64 * 1024


class State:
    def __init__(self, token: str, secret: str, receipt_delay: float) -> None:
        self.token = token
        self.secret = secret
        self.receipt_delay = receipt_delay
        self.lock = threading.Lock()
        self.messages: dict[str, dict[str, Any]] = {}
        self.ids = itertools.count(1)
        self.stats = {"submissions": 0, "rejections": 0, "receipts_posted": 0, "receipts_failed": 0}

    def store(self, fields: dict[str, str]) -> dict[str, Any]:
        with self.lock:
            message = {"id": f"FP{next(self.ids):010d}", "status": "accepted", **fields}
            self.messages[message["id"]] = message
            self.stats["submissions"] += 1
        self._later(self.receipt_delay, self.deliver, message)
        return message

    @staticmethod
    def _later(seconds: float, call: Any, *args: Any) -> None:
        timer = threading.Timer(seconds, call, args=args)
        timer.daemon = True
        timer.start()

    def deliver(self, message: dict[str, Any]) -> None:
        """The message is delivered: its status, then its signed receipt (``post_receipt``)."""
        with self.lock:
            message["status"] = "delivered"
        if message.get("callback_url"):
            self.post_receipt(message["callback_url"], {"id": message["id"], "status": "delivered"}, 0)

    def post_receipt(self, url: str, fields: dict[str, str], attempt: int) -> None:
        """POST one signed receipt; a refused or failed post is tried again later, RECEIPT_TRIES in all."""
        request = urllib.request.Request(url, data=urlencode(fields).encode(), method="POST")
        request.add_header("Content-Type", FORM)
        request.add_header(SIGNATURE_HEADER, signature(self.secret, url, fields))
        try:
            with urllib.request.urlopen(request, timeout=10):
                pass
        except (urllib.error.URLError, OSError):
            if attempt + 1 < RECEIPT_TRIES:
                self._later(0.2 * (attempt + 1), self.post_receipt, url, fields, attempt + 1)
            else:
                with self.lock:
                    self.stats["receipts_failed"] += 1
            return
        with self.lock:
            self.stats["receipts_posted"] += 1


class Handler(BaseHTTPRequestHandler):
    state: State  # set by handler_for

    def log_message(self, format: str, *args: Any) -> None:
        return  # no access log (it would carry numbers)

    def _answer(self, status: int, data: Any) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _authorized(self) -> bool:
        return self.headers.get("Authorization", "") == f"Bearer {self.state.token}"

    def do_GET(self) -> None:
        path, state = self.path.split("?", 1)[0], self.state
        if path == "/_sandbox/health":
            return self._answer(200, {"ok": True})
        if path.startswith("/v1/messages/"):
            return self._message(path.removeprefix("/v1/messages/"))
        with state.lock:
            if path == "/_sandbox/messages":
                return self._answer(200, list(state.messages.values()))
            if path == "/_sandbox/stats":
                return self._answer(200, dict(state.stats))
        return self._answer(404, {"code": "not_found"})

    def _message(self, provider_id: str) -> None:
        if not self._authorized():
            return self._answer(401, {"code": "auth"})
        with self.state.lock:
            found = self.state.messages.get(provider_id)
            answer = None if found is None else {"id": found["id"], "status": found["status"]}
        if answer is None:
            return self._answer(404, {"code": "not_found"})
        return self._answer(200, answer)

    def do_POST(self) -> None:
        if self.path != "/v1/messages":
            return self._answer(404, {"code": "not_found"})
        if not self._authorized():
            with self.state.lock:
                self.state.stats["rejections"] += 1
            return self._answer(401, {"code": "auth"})
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            return self._answer(413, {"code": "too_large"})
        try:
            data = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return self._answer(400, {"code": "invalid", "field": "body"})
        missing = next(
            (f for f in ("to", "from", "body") if not isinstance(data.get(f), str) or not data[f]), ""
        )
        if missing:
            return self._answer(400, {"code": "invalid", "field": missing})
        message = self.state.store({k: str(data.get(k, "")) for k in ("to", "from", "body", "callback_url")})
        return self._answer(201, {"id": message["id"], "status": "accepted"})


def handler_for(state: State) -> type[BaseHTTPRequestHandler]:
    return type("BoundHandler", (Handler,), {"state": state})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="The fake provider's sandbox")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--token", default=DEFAULT_TOKEN)
    p.add_argument("--signing-secret", default=DEFAULT_SECRET)
    p.add_argument("--receipt-delay", type=float, default=0.05)
    args = p.parse_args(argv)
    state = State(args.token, args.signing_secret, args.receipt_delay)
    server = ThreadingHTTPServer((args.host, args.port), handler_for(state))
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    host, port = server.server_address[:2]
    print(f"fakeprov sandbox listening on http://{host}:{port}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
