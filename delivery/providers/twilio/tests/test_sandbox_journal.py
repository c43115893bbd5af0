"""The sandbox's store on disk (``--state-file``, delivery.providers.twilio.sandbox.journal): a sandbox killed with SIGKILL
and started again still has every message it answered 201 for, as Twilio would, and sends the status
callbacks they are still owed. Real sandbox processes; the SDK reads them back."""

from __future__ import annotations

import base64
import json
import signal
import threading
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.sandbox_process import SandboxProcess
from tests.waiting import wait_for


def _create(sandbox: SandboxProcess, to: str, callback: str) -> dict:
    form = urllib.parse.urlencode(
        {"To": to, "From": "+14155550100", "Body": f"journal {to}", "StatusCallback": callback}
    ).encode()
    auth = base64.b64encode(f"{sandbox.account_sid}:{sandbox.auth_token}".encode()).decode()
    req = urllib.request.Request(
        f"{sandbox.base_url}/2010-04-01/Accounts/{sandbox.account_sid}/Messages.json",
        data=form,
        headers={"Authorization": f"Basic {auth}", "Content-Type": "application/x-www-form-urlencoded"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 201
        return json.loads(resp.read())


class FormReceiver:
    """A status-callback endpoint on loopback: the (MessageSid, MessageStatus) of every POST it got."""

    def __init__(self) -> None:
        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                form = dict(urllib.parse.parse_qsl(body))
                received.append((form["MessageSid"], form["MessageStatus"]))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/status"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def statuses(self) -> set[tuple[str, str]]:
        return set(self.received)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def test_a_sandbox_killed_and_started_again_keeps_its_messages_and_sends_the_callbacks_owed(tmp_path):
    state = tmp_path / "sandbox-messages.jsonl"
    receiver = FormReceiver()
    try:
        # Messages leave the sender's queue 4 s after their create: their sent/delivered callbacks are
        # due after the kill below.
        args = ["--state-file", str(state), "--queue-delay-ms", "4000", "--callback-gap-ms", "200"]
        first = SandboxProcess(extra_args=args).start()
        created = [_create(first, f"+1415555{i:04d}", receiver.url) for i in range(3)]
        assert first.stats()["submissions"] == 3
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(10)
        assert not receiver.received  # nothing was due yet

        second = SandboxProcess(extra_args=args).start()
        try:
            assert second.stats()["submissions"] == 3
            listed = {m.sid: m for m in second.list_messages()}
            assert set(listed) == {c["sid"] for c in created}
            for c in created:
                assert listed[c["sid"]].to == c["to"] and listed[c["sid"]].body == c["body"]
            wanted = {(c["sid"], status) for c in created for status in ("sent", "delivered")}
            wait_for(lambda: wanted <= receiver.statuses(), 30, "the callbacks owed after the restart")
            assert {m.sid: m.status for m in second.list_messages()} == {
                c["sid"]: "delivered" for c in created
            }
            # A new message after the restart is stored beside them, with a sequence of its own.
            _create(second, "+14155559999", receiver.url)
            assert second.stats()["submissions"] == 4
            assert len(state.read_text().splitlines()) == 4
            second.reset()
            assert state.read_text() == ""  # a reset forgets the store on disk too
        finally:
            second.stop()
    finally:
        receiver.stop()


def test_a_journal_line_cut_short_by_a_crash_is_skipped(tmp_path):
    state = tmp_path / "sandbox-messages.jsonl"
    args = ["--state-file", str(state)]
    first = SandboxProcess(extra_args=args).start()
    _create(first, "+14155550001", "")
    first.stop()
    with state.open("a") as f:
        f.write('{"seq": 1, "sid": "SMcut')  # a write the crash interrupted
    second = SandboxProcess(extra_args=args).start()
    try:
        assert second.stats()["submissions"] == 1
    finally:
        second.stop()
