"""A TCP proxy in front of the shared PostgreSQL server (or any TCP service), so a test can take it away
from one process (point its DATABASE_URL here, then ``down()``) without touching the server others use.
``stall()`` keeps every connection open and forwards nothing: a server that stopped answering without
going away (a frozen host, a server stopped mid-query), which no connection error reveals. ``netns`` puts
the listening socket in another network namespace (tests.integration.split_host), so processes there
reach a service of this host through it. ``mute()`` forwards what clients send and drops what comes back
(a request written, its answer lost: a read timeout), ``refuse()`` closes the port (connections refused:
nothing written), as a network cut between one host and a provider looks (tests.integration.test_host_circuit)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading


class DatabaseProxy:
    def __init__(self, upstream: tuple[str, int], *, host: str = "127.0.0.1", netns: str | None = None):
        self.upstream = upstream
        self.host = host
        self.netns = netns
        self._listener = _listen_in(netns, host) if netns else socket.create_server((host, 0))
        self.port = self._listener.getsockname()[1]
        self._up = True
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = False
        self._flowing = threading.Event()
        self._flowing.set()
        self.stalled_reads = 0  # chunks a client sent while stalled (held, not forwarded)
        self._muted = False
        self._refused = False
        self._serve()

    def _serve(self) -> None:
        threading.Thread(target=self._accept, args=(self._listener,), name="db-proxy", daemon=True).start()

    def down(self) -> None:
        """Every connection through the proxy is cut, and new ones are closed at once: to the client,
        the database server went away."""
        with self._lock:
            self._up = False
            sockets, self._open = self._open, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._flowing.set()  # pumps held by a stall wake up to find their sockets closed

    def stall(self) -> None:
        """Nothing is forwarded either way until ``up()``; connections stay open and new ones are
        accepted (the kernel still acknowledges what clients send, so they just wait for an answer)."""
        self._flowing.clear()

    def mute(self) -> None:
        """Requests still reach the server; its answers are dropped on the way back."""
        self._muted = True

    def refuse(self) -> None:
        """The port is closed (a connection is refused: nothing is written) and every connection cut."""
        assert self.netns is None, "refuse() re-listens in this process's namespace only"
        self._refused = True
        self._listener.close()
        self.down()

    def up(self) -> None:
        if self._refused:
            self._refused = False
            self._listener = socket.create_server((self.host, self.port))  # SO_REUSEADDR: the same port
            self._serve()
        self._muted = False
        with self._lock:
            self._up = True
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        self.down()
        self._listener.close()

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with self._lock:
                up = self._up
            if not up:
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, server))
            for src, dst, answers in ((client, server, False), (server, client, True)):
                threading.Thread(target=self._pump, args=(src, dst, answers), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        try:
            while data := src.recv(65536):
                if answers and self._muted:
                    continue  # the server's answer is lost on the way back
                if not self._flowing.is_set():
                    with self._lock:
                        self.stalled_reads += 1
                    self._flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def _listen_in(netns: str, host: str) -> socket.socket:
    """A listening socket in the network namespace at path ``netns``. A socket stays in the namespace it
    was created in; setns() moves only the calling thread, so a throwaway thread makes it and exits
    (the accepting thread and the upstream connections stay in this process's own namespace)."""
    made: list[socket.socket | BaseException] = []

    def make() -> None:
        try:
            fd = os.open(netns, os.O_RDONLY)
            try:
                os.setns(fd, os.CLONE_NEWNET)
            finally:
                os.close(fd)
            made.append(socket.create_server((host, 0)))
        except BaseException as exc:
            made.append(exc)

    thread = threading.Thread(target=make, name="db-proxy-netns")
    thread.start()
    thread.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]
