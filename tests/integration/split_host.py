"""Processes on a host of their own, whose links to this host's services a test can cut like a real
network cut: packets dropped silently in both directions, nothing refused, nothing closed.

A TCP proxy in user space cannot fake that: its kernel acknowledges every byte and every keepalive probe,
so TCP keepalives and TCP_USER_TIMEOUT (what smsgw sets so a worker notices a dead peer) never fire
through it. Here the processes run in a private network namespace (the "far host"), joined to a second
private namespace by one veth pair per link; a DatabaseProxy in this test process listens in the second
namespace and forwards to the real service. ``Link.blackhole()`` takes the veth pair down: the kernel
drops what crosses it, new connections' SYNs go unanswered, established ones see no acknowledgement.
Neighbour entries are static, so a cut never turns into a quick "no route to host".

Nothing on this host's own network changes: both namespaces are private and vanish with their holder
processes. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), ``unshare``, ``nsenter`` and ``ip``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

from tests.integration.db_proxy import DatabaseProxy
from tests.waiting import wait_for


def split_host_unavailable() -> str | None:
    """Why this machine cannot run a split host, or None."""
    missing = [tool for tool in ("unshare", "nsenter", "ip") if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)}"
    if os.geteuid() != 0 or not hasattr(os, "setns"):
        return "needs root and os.setns (Python 3.12+) for private network namespaces"
    return None


class _Namespace:
    """A private network namespace, alive as long as its holder process (``sleep``)."""

    def __init__(self) -> None:
        self.holder = subprocess.Popen(["unshare", "--net", "--", "sleep", "infinity"])
        self.path = f"/proc/{self.holder.pid}/ns/net"

        # unshare has switched namespaces once its /proc entry names a different one than ours.
        def switched() -> bool:
            if self.holder.poll() is not None:
                raise RuntimeError("unshare --net exited")
            return os.readlink(self.path) != os.readlink("/proc/self/ns/net")

        wait_for(switched, 10, "unshare --net to switch namespaces", interval=0.01)

    def ip(self, *args: str) -> str:
        return subprocess.run(
            ["nsenter", f"--net={self.path}", "ip", *args], check=True, capture_output=True, text=True
        ).stdout

    def mac(self, dev: str) -> str:
        return json.loads(self.ip("-j", "link", "show", dev))[0]["address"]

    def close(self) -> None:
        if self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait(10)


class Link:
    """One veth pair from the far host to a proxy for one service of this host."""

    def __init__(self, far: _Namespace, near: _Namespace, index: int, upstream: tuple[str, int]) -> None:
        self._near = near
        self._dev = f"near{index}"
        far_dev, far_ip, near_ip = f"far{index}", f"10.201.{index}.1", f"10.201.{index}.2"
        far.ip(
            "link", "add", far_dev, "type", "veth", "peer", "name", self._dev, "netns", str(near.holder.pid)
        )
        far.ip("addr", "add", f"{far_ip}/30", "dev", far_dev)
        far.ip("link", "set", far_dev, "up")
        near.ip("addr", "add", f"{near_ip}/30", "dev", self._dev)
        near.ip("link", "set", self._dev, "up")
        far.ip("neigh", "replace", near_ip, "lladdr", near.mac(self._dev), "dev", far_dev, "nud", "permanent")
        near.ip("neigh", "replace", far_ip, "lladdr", far.mac(far_dev), "dev", self._dev, "nud", "permanent")
        self.proxy = DatabaseProxy(upstream, host=near_ip, netns=near.path)
        self.host, self.port = near_ip, self.proxy.port

    def blackhole(self) -> None:
        """Cut the link: every packet across it is dropped, in both directions, from now on."""
        self._near.ip("link", "set", self._dev, "down")

    def restore(self) -> None:
        """The link is back: new connections go through; an old one resumes if neither end gave it up."""
        self._near.ip("link", "set", self._dev, "up")


class SplitHost:
    def __init__(self) -> None:
        self._far = _Namespace()
        self._near = _Namespace()
        self._far.ip("link", "set", "lo", "up")
        self.links: list[Link] = []

    def link(self, upstream: tuple[str, int]) -> Link:
        link = Link(self._far, self._near, len(self.links) + 1, upstream)
        self.links.append(link)
        return link

    @property
    def wrap(self) -> tuple[str, ...]:
        """The command prefix that runs a process on the far host."""
        return ("nsenter", f"--net={self._far.path}", "--")

    def close(self) -> None:
        for link in self.links:
            link.proxy.close()
        self._far.close()
        self._near.close()
