"""A tiny real HTTP endpoint in a thread standing in for the gateway, for the sandboxes' webhooks (inbound
messages): it records every request (method, full URL, headers, fields of a form, JSON or query) and
answers from a script."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit


class ProviderWebhookReceiver:
    """``answers``: (status, body, content type) for the first requests, in order; then ``default``."""

    def __init__(self, answers: list[tuple[int, str, str]] | None = None, default=(200, "", "text/plain")):
        self.records: list[dict] = []
        self.answers = list(answers or [])
        self.default = default
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                split = urlsplit(self.path)
                if self.headers.get("Content-Type", "").startswith("application/json"):
                    fields = json.loads(raw)
                elif raw:
                    fields = dict(parse_qsl(raw.decode(), keep_blank_values=True))
                else:
                    fields = dict(parse_qsl(split.query, keep_blank_values=True))
                with receiver.lock:
                    status, body, content_type = (
                        receiver.answers.pop(0) if receiver.answers else receiver.default
                    )
                    receiver.records.append(
                        {
                            "at": time.monotonic(),
                            "method": self.command,
                            "url": f"http://{self.headers['Host']}{self.path}",
                            "path": split.path,
                            "headers": dict(self.headers),
                            "fields": fields,
                            "answered": status,
                        }
                    )
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _handle

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def url(self, path: str = "/inbound/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def seen(self) -> list[dict]:
        with self.lock:
            return list(self.records)

    def __enter__(self) -> ProviderWebhookReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.server.shutdown()
        self.server.server_close()
