"""A tenant's webhook endpoint for tests: a real HTTP server on loopback that records what it gets."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench.harness.devprocs import free_port


class WebhookReceiver:
    def __init__(self, port: int | None = None, *, fail_first: int = 0, answer: bytes = b""):
        """``answer``: the body of a 200 (text/xml) instead of an empty 204, e.g. a Twilio program's TwiML."""
        self.port = port or free_port()
        self.received: list[dict] = []
        self.fail_first = fail_first
        self.answer = answer
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/sms"

    def start(self) -> WebhookReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.do_POST()

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                if receiver.fail_first > 0:
                    receiver.fail_first -= 1
                    self.send_response(503)
                    self.end_headers()
                    return
                receiver.received.append(
                    {
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body,
                        "json": json.loads(body)
                        if "json" in (self.headers.get("Content-Type") or "")
                        else None,
                        "path": self.path,
                        "method": self.command,
                    }
                )
                if receiver.answer:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/xml")
                    self.send_header("Content-Length", str(len(receiver.answer)))
                    self.end_headers()
                    self.wfile.write(receiver.answer)
                    return
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
