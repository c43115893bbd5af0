"""Webhook delivery over TLS connects to the address it checked (no second DNS resolution) and still
verifies the certificate against the URL's host name: a real local TLS server, a throwaway CA."""

from __future__ import annotations

import http.server
import shutil
import ssl
import subprocess
import threading

import pytest

from receipts.webhook_http import post_pinned
from receipts.webhooks import webhook_target

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
LIMITS = {"deadline_seconds": 5.0, "max_body": 4096}


@pytest.fixture
def tls_server(tmp_path, monkeypatch, settings):
    settings.WEBHOOK_ALLOW_PRIVATE = True
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client trusts this certificate only
    seen: dict = {}

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            seen["host"] = self.headers["Host"]
            seen["body"] = self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], seen
    server.shutdown()


def test_tls_delivery_goes_to_the_checked_address_with_the_host_verified(tls_server):
    port, seen = tls_server
    url = f"https://localhost:{port}/hook?x=1"
    host, checked_port, address = webhook_target(url)
    assert (host, checked_port) == ("localhost", port) and address in ("127.0.0.1", "::1")
    code = post_pinned(
        url, host, checked_port, "127.0.0.1", b'{"a":1}', {"Content-Type": "application/json"}, **LIMITS
    )
    assert code == 204 and seen == {"host": f"localhost:{port}", "body": b'{"a":1}'}


def test_tls_delivery_refuses_a_certificate_for_another_name(tls_server):
    import urllib3

    port, _ = tls_server
    with pytest.raises(urllib3.exceptions.SSLError):
        post_pinned(
            f"https://other.example:{port}/hook", "other.example", port, "127.0.0.1", b"{}", {}, **LIMITS
        )
