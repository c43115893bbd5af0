"""One webhook POST with a wall-clock deadline and a small response cap.

urllib3's timeouts apply to each socket operation: a tenant's server that answers one byte every few
seconds (in its headers or its body) never trips them, and a body read whole can be any size, so one
endpoint could hold a worker thread, and the batch that waits for it, indefinitely. Here a timer shuts
the delivery's socket down when its deadline passes, whatever the request is doing, and at most
``max_body`` bytes of the answer are read: only its status code counts.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection


class DeadlinePassed(urllib3.exceptions.HTTPError):
    """The delivery's wall-clock deadline passed before the server's status line arrived."""


@dataclass
class _Sockets:
    """The sockets one delivery opened, so the timer can shut them down from its own thread."""

    opened: list[socket.socket] = field(default_factory=list)
    expired: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, sock: socket.socket) -> None:
        with self.lock:
            if self.expired:
                sock.shutdown(socket.SHUT_RDWR)
            self.opened.append(sock)

    def expire(self) -> None:
        with self.lock:
            self.expired = True
            for sock in self.opened:
                with contextlib.suppress(OSError):  # already closed
                    sock.shutdown(socket.SHUT_RDWR)  # a blocked recv() returns at once


def _tracked[C: HTTPConnection](base: type[C], sockets: _Sockets) -> type[C]:
    class Tracked(base):  # type: ignore[valid-type,misc]
        def _new_conn(self) -> socket.socket:
            sock = super()._new_conn()
            sockets.add(sock)  # the raw TCP socket, under TLS too
            return sock

    return Tracked


def post_pinned(
    url: str,
    host: str,
    port: int,
    address: str,
    body: bytes,
    headers: dict,
    *,
    deadline_seconds: float,
    max_body: int,
) -> int:
    """POST to ``address`` (already checked), presenting ``host`` for the Host header, TLS SNI and
    certificate verification (the name is never resolved a second time); the answer's status code.
    Raises an urllib3 HTTPError (DeadlinePassed when the deadline cut the request short)."""
    return request_pinned(
        url, host, port, address, body, headers, deadline_seconds=deadline_seconds, max_body=max_body
    )[0]


def request_pinned(
    url: str,
    host: str,
    port: int,
    address: str,
    body: bytes,
    headers: dict,
    *,
    deadline_seconds: float,
    max_body: int,
    method: str = "POST",
) -> tuple[int, bytes]:
    """``post_pinned`` with the method given (GET for a Twilio SmsMethod=GET: the form in the URL, no
    body) and the answer's first ``max_body`` bytes too (those read before the deadline; a Twilio
    program's TwiML, receipts.webhooks)."""
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    # Per operation too, so a dead server fails fast; the timer bounds the whole.
    timeout = urllib3.Timeout(connect=deadline_seconds, read=deadline_seconds)
    sockets = _Sockets()
    pool: urllib3.HTTPConnectionPool
    if parts.scheme == "https":
        pool = urllib3.HTTPSConnectionPool(
            address, port, server_hostname=host, assert_hostname=host, timeout=timeout, retries=False
        )
        pool.ConnectionCls = _tracked(HTTPSConnection, sockets)
    else:
        pool = urllib3.HTTPConnectionPool(address, port, timeout=timeout, retries=False)
        pool.ConnectionCls = _tracked(HTTPConnection, sockets)
    netloc = host if port in (80, 443) else f"{host}:{port}"
    if ":" in host and not host.startswith("["):
        netloc = f"[{host}]" if port in (80, 443) else f"[{host}]:{port}"
    timer = threading.Timer(deadline_seconds, sockets.expire)
    timer.daemon = True
    started = time.monotonic()
    timer.start()
    try:
        try:
            resp = pool.urlopen(
                method,
                path,
                body=body if body or method == "POST" else None,
                headers={**headers, "Host": netloc},
                redirect=False,
                preload_content=False,
            )
        except urllib3.exceptions.HTTPError:
            # By the clock as well as by the timer's flag: a read timeout is as long as the deadline, and
            # on a loaded machine it can fire before the timer's thread has run.
            if sockets.expired or time.monotonic() - started >= deadline_seconds:
                raise DeadlinePassed(f"no answer within {deadline_seconds:g} s") from None
            raise
        # The status is the answer: the body is read only up to max_body, and one cut by the deadline
        # changes nothing (what came before it is kept).
        answer = b""
        with contextlib.suppress(urllib3.exceptions.HTTPError, OSError):
            answer = resp.read(max_body)
        resp.close()
        return resp.status, answer
    finally:
        timer.cancel()
        pool.close()
