"""The fake provider's sandbox as a real process: it stores what it is sent, refuses what it must, and
posts a signed receipt for each message to the URL the message named."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl

import pytest

from tests.fakeprovider.config import SIGNATURE_HEADER, signature
from tests.fakeprovider.sandbox.process import FakeSandboxProcess
from tests.waiting import wait_for


@pytest.fixture(scope="module")
def sandbox():
    with FakeSandboxProcess() as process:
        yield process


class Receiver:
    """A local HTTP server that keeps every receipt posted to it (fields and signature)."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, str], str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format, *args):
                return

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                outer.received.append(
                    (self.path, dict(parse_qsl(body)), self.headers.get(SIGNATURE_HEADER, ""))
                )
                self.send_response(204)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _post(sandbox, payload: dict, token: str | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(
        sandbox.base_url + "/v1/messages", data=json.dumps(payload).encode(), method="POST"
    )
    request.add_header("Authorization", f"Bearer {token or sandbox.token}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_message_is_stored_and_its_signed_receipt_posted_to_its_callback_url(sandbox):
    receiver = Receiver()
    try:
        callback = f"{receiver.url}/receipts/fakeprov/?m=abc&a=1"
        status, answer = _post(
            sandbox, {"to": "+15550001111", "from": "+15550002222", "body": "hi", "callback_url": callback}
        )
        assert status == 201 and answer["status"] == "accepted" and answer["id"].startswith("FP")
        wait_for(lambda: receiver.received, 10, "the receipt")
        path, fields, signed = receiver.received[0]
        assert path == "/receipts/fakeprov/?m=abc&a=1"
        assert fields == {"id": answer["id"], "status": "delivered"}
        assert signed == signature(sandbox.secret, callback, fields)
        stored = [m for m in sandbox.messages() if m["id"] == answer["id"]]
        assert stored == [{**stored[0], "to": "+15550001111", "status": "delivered"}]
    finally:
        receiver.close()


def test_a_wrong_token_is_a_401_and_stores_nothing(sandbox):
    before = len(sandbox.messages())
    status, answer = _post(sandbox, {"to": "+15550001111", "from": "x", "body": "hi"}, token="wrong")
    assert (status, answer) == (401, {"code": "auth"})
    assert len(sandbox.messages()) == before


@pytest.mark.parametrize("missing", ["to", "from", "body"])
def test_a_missing_field_is_a_400_naming_it(sandbox, missing):
    payload = {"to": "+15550001111", "from": "+15550002222", "body": "hi"}
    del payload[missing]
    assert _post(sandbox, payload) == (400, {"code": "invalid", "field": missing})
