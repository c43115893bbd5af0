"""Shared by the Vonage sandbox's tests: the official SDK pointed at the sandbox, and a receipt endpoint."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

from vonage import Auth, HttpClientOptions, Vonage

FAST = {"callback_delay_ms": 0, "callback_gap_ms": 0, "callback_retry_backoff_ms": 10}


def sdk(sandbox, *, timeout: int | None = None, pool_maxsize: int = 10, **auth) -> Vonage:
    """The official SDK with ``rest_host`` pointed at the sandbox and its CA trusted. ``trust_env`` off:
    requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE from the environment override a session's
    ``verify``."""
    auth = auth or {"api_key": sandbox.api_key, "api_secret": sandbox.api_secret}
    client = Vonage(
        Auth(**auth),
        HttpClientOptions(rest_host=sandbox.rest_host, timeout=timeout, pool_maxsize=pool_maxsize),
    )
    session = client.http_client._session
    session.trust_env = False
    session.verify = sandbox.ca_file
    return client


class ReceiptReceiver:
    """A receipt webhook: records every request (method, path, headers, fields) and answers 200."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _record(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                url = urlsplit(self.path)
                if self.headers.get("Content-Type", "").startswith("application/json"):
                    fields = json.loads(raw)
                elif raw:
                    fields = dict(parse_qsl(raw.decode(), keep_blank_values=True))
                else:
                    fields = dict(parse_qsl(url.query, keep_blank_values=True))
                with receiver.lock:
                    receiver.records.append(
                        {
                            "method": self.command,
                            "path": url.path,
                            "headers": dict(self.headers),
                            "fields": fields,
                        }
                    )
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_POST = do_GET = _record

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def url(self, path: str = "/dlr") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def seen(self) -> list[dict]:
        with self.lock:
            return list(self.records)

    def fields(self) -> list[dict]:
        return [r["fields"] for r in self.seen()]
