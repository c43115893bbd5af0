"""A webhook POST is bounded in time and in what it reads (receipts.webhook_http), against a real local
socket server: one that trickles its status line or its body a byte at a time, one that sends a huge
body, one that never answers. The whole delivery ends by its wall-clock deadline."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from receipts.webhook_http import DeadlinePassed, post_pinned
from tests.waiting import wait_for

DEADLINE = 0.5
# Generous against a loaded machine; what it catches is a delivery that runs as long as the server likes.
GRACE = 1.5


class RawServer:
    """A loopback TCP server that reads the request and answers with ``reply(conn)``: raw bytes, so a
    test controls exactly how (and how slowly) the answer arrives."""

    def __init__(self, reply) -> None:
        self.reply = reply
        self.stop = threading.Event()
        self.sent = 0
        self.served = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                with contextlib.suppress(OSError):  # the client hung up: what the deadline is for
                    self.reply(self, conn)
            self.served.set()

    def trickle(self, conn, data: bytes, pause: float = 0.1) -> None:
        # Event.wait as the pause: the server side of the scenario, not a test waiting for something.
        for i in range(len(data)):
            if self.stop.wait(pause):
                return
            conn.sendall(data[i : i + 1])
            self.sent += 1

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture
def serve() -> Iterator:
    servers: list[RawServer] = []

    def start(reply) -> RawServer:
        servers.append(RawServer(reply))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def post(port: int, *, max_body: int = 4096) -> int:
    return post_pinned(
        f"http://127.0.0.1:{port}/hook", "127.0.0.1", port, "127.0.0.1", b"{}", {},
        deadline_seconds=DEADLINE, max_body=max_body,
    )  # fmt: skip


def test_a_server_trickling_its_status_line_is_cut_off_at_the_deadline(serve):
    server = serve(lambda s, conn: s.trickle(conn, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
    started = time.monotonic()
    with pytest.raises(DeadlinePassed):
        post(server.port)
    assert time.monotonic() - started < DEADLINE + GRACE
    assert server.sent < 40  # it had not finished: the answer never counted


def test_a_server_trickling_its_body_after_a_2xx_is_cut_off_and_the_status_counts(serve):
    def reply(s, conn):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        s.trickle(conn, b"x" * 100000)

    server = serve(reply)
    started = time.monotonic()
    assert post(server.port) == 200
    assert time.monotonic() - started < DEADLINE + GRACE


def test_a_server_that_never_answers_is_cut_off_at_the_deadline(serve):
    server = serve(lambda s, conn: s.stop.wait(30))
    started = time.monotonic()
    with pytest.raises(DeadlinePassed):
        post(server.port)
    assert time.monotonic() - started < DEADLINE + GRACE


def test_a_huge_body_is_not_read_past_the_cap(serve):
    body_size = 50 * 1024 * 1024

    def reply(s, conn):
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {body_size}\r\n\r\n".encode())
        chunk = b"y" * 65536
        for _ in range(body_size // len(chunk)):
            conn.sendall(chunk)
            s.sent += len(chunk)

    server = serve(reply)
    started = time.monotonic()
    assert post(server.port, max_body=4096) == 200
    assert time.monotonic() - started < DEADLINE + GRACE
    # The client hung up after its 4 KiB, so the server's sending failed long before 50 MiB went out
    # (socket buffers hold a few MiB at most).
    wait_for(server.served.is_set, 10, "the server to finish with the connection")
    assert server.sent < body_size // 4
