"""The embedded run's supervisor: starts every provider's sandbox, gunicorn, one celery worker and celery
beat, keeps them running, and stops them all together. ``deploy/run-embedded.sh`` runs it after
installing and migrating; it imports nothing of the project (only the standard library), so it cannot
fail with it. The sandboxes come from the provider registry, read by the script beforehand
(``python -m delivery.providers.kits embedded``: each registered provider's kit says its command, its
health URL, the environment the gateway needs to reach it and its banner line) and handed over as a
JSON file (``--sandboxes``); no provider is named here.

* **A child that dies is started again**, with a log line and a backoff: 1 s after a run of at least
  ``STABLE_SECONDS``, doubling (up to ``MAX_BACKOFF``) while it keeps dying sooner, so a child that cannot
  start does not spin. Nothing else is touched: the others keep running. A restart loses no message: the
  database is the source of truth (a task the dead worker held is published again by the sweep's
  recovery of stale ``queued`` rows), and the sandbox keeps its store in a journal
  (sandbox.journal).
* **Ctrl-C or SIGTERM stops everything within 30 s**: SIGTERM to every child's process group at once
  (each child runs in a session of its own, so a terminal's Ctrl-C reaches only this process, which then
  stops them in order), the sandbox last so the worker's last submissions get their answers, and
  SIGKILL for whatever is still there after ``STOP_SECONDS``. Children also get SIGTERM if this process
  dies without stopping them (Linux's PR_SET_PDEATHSIG).
* Each child's output is passed through with its name in front. ``SMSGW_VAR_DIR/embedded.json`` says at
  every change which children run, under which pid, and how often each was restarted (the tests and
  ``python -m bench.scenarios.embedded`` read it).

Why not supervisord: it gives a process up for good (FATAL) after ``startretries`` quick exits, needs a
configuration file rendered for each run's ports and paths, and shows the children's output unlabelled;
what is needed here is about 200 lines of the standard library.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import selectors
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

STABLE_SECONDS = 60.0  # a child that ran this long before it died is restarted after 1 s
MAX_BACKOFF = 30.0
STOP_SECONDS = 25.0  # SIGTERM to SIGKILL; within the 30 s a process manager or a test allows
READY_SECONDS = 180.0
PR_SET_PDEATHSIG = 1


def _parent_death_signal() -> None:
    """In the child, between fork and exec: SIGTERM when the supervisor dies (Linux)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Child:
    def __init__(
        self,
        name: str,
        argv: list[str],
        ready_url: str | None = None,
        ready_line: str = "",
        *,
        stops_last: bool = False,
    ):
        self.name = name
        self.stops_last = stops_last  # a sandbox: stopped once nothing can submit to it any more
        self.argv = argv
        self.ready_url = ready_url
        self.ready_line = ready_line.encode()
        self.popen: subprocess.Popen | None = None
        self.started = 0.0
        self.restarts = 0
        self.quick_exits = 0
        self.restart_at: float | None = None
        self.ready = False
        self._partial = b""

    def start(self) -> None:
        self.popen = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_parent_death_signal,  # no threads here: one loop, one thread
        )
        os.set_blocking(self.popen.stdout.fileno(), False)
        self.started = time.monotonic()
        self.restart_at = None
        self.ready = self.ready_url is None and not self.ready_line
        self._partial = b""

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.returncode is None

    def output(self, out) -> bool:
        """Copy what the child wrote, line by line with its name in front. False at end of file."""
        try:
            chunk = os.read(self.popen.stdout.fileno(), 65536)
        except (BlockingIOError, InterruptedError):
            return True
        except (OSError, ValueError):  # closed
            chunk = b""
        if not chunk:
            self._flush(out)
            return False
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        prefix = f"{self.name:<8}| ".encode()
        for line in lines:
            if self.ready_line and self.ready_line in line:
                self.ready = True
            out.write(prefix + line + b"\n")
        out.flush()
        return True

    def _flush(self, out) -> None:
        if self._partial:
            out.write(f"{self.name:<8}| ".encode() + self._partial + b"\n")
            out.flush()
            self._partial = b""

    def signal_group(self, sig: int) -> None:
        if self.running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, sig)


class Supervisor:
    def __init__(self, children: list[Child], status_path: Path, banner: str) -> None:
        self.children = children
        self.status_path = status_path
        self.banner = banner
        self.selector = selectors.DefaultSelector()
        self.stopping = False
        self.out = sys.stdout.buffer

    def say(self, text: str) -> None:
        self.out.write(f"embedded| {text}\n".encode())
        self.out.flush()

    def status_write(self) -> None:
        status = {
            "supervisor": os.getpid(),
            "children": {
                c.name: {"pid": c.popen.pid if c.running else None, "restarts": c.restarts}
                for c in self.children
            },
        }
        temporary = self.status_path.with_suffix(".tmp")
        temporary.write_text(json.dumps(status))
        os.replace(temporary, self.status_path)

    def _start(self, child: Child) -> None:
        child.start()
        self.selector.register(child.popen.stdout, selectors.EVENT_READ, child)

    def _on_stop_signal(self, signum, _frame) -> None:
        self.stopping = True

    def run(self) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_stop_signal)
        rfd, wfd = os.pipe()
        os.set_blocking(wfd, False)
        signal.set_wakeup_fd(wfd)  # a stop signal wakes the select below at once
        self.selector.register(rfd, selectors.EVENT_READ, None)
        for child in self.children:
            self._start(child)
        self.status_write()
        announced = False
        ready_by = time.monotonic() + READY_SECONDS
        while not self.stopping:
            for key, _ in self.selector.select(timeout=0.5):
                if key.data is None:
                    with contextlib.suppress(BlockingIOError):
                        os.read(rfd, 512)
                elif not key.data.output(self.out):
                    self.selector.unregister(key.fileobj)
            if self.stopping:
                break
            self._reap_and_restart()
            if not announced and (self._all_ready() or time.monotonic() > ready_by):
                announced = True
                if not self._all_ready():
                    waiting = ", ".join(c.name for c in self.children if not c.ready)
                    self.say(f"still waiting for {waiting} after {READY_SECONDS:g} s; see its lines above")
                self.out.write(self.banner.encode())
                self.out.flush()
        return self.stop()

    def _all_ready(self) -> bool:
        for child in self.children:
            if not child.ready and child.running and child.ready_url:
                with (
                    contextlib.suppress(OSError, ValueError),
                    urllib.request.urlopen(child.ready_url, timeout=2) as response,  # noqa: S310
                ):
                    child.ready = response.status == 200
        return all(c.ready for c in self.children)

    def _reap_and_restart(self) -> None:
        now = time.monotonic()
        changed = False
        for child in self.children:
            if child.popen is not None and child.popen.returncode is None and child.popen.poll() is not None:
                self._drain(child)
                ran = now - child.started
                child.quick_exits = 0 if ran >= STABLE_SECONDS else child.quick_exits + 1
                delay = min(MAX_BACKOFF, 2.0 ** max(0, child.quick_exits - 1))
                child.restart_at = now + delay
                code = child.popen.returncode
                how = f"signal {-code}" if code < 0 else f"status {code}"
                self.say(
                    f"{child.name} exited ({how}) after {ran:.0f} s; restarting it in {delay:g} s "
                    f"(restart {child.restarts + 1})"
                )
                changed = True
            if child.restart_at is not None and now >= child.restart_at:
                child.restarts += 1
                self._start(child)
                self.say(f"{child.name} started again (pid {child.popen.pid})")
                changed = True
        if changed:
            self.status_write()

    def _drain(self, child: Child) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(child.popen.stdout)
        with contextlib.suppress(ValueError, OSError):
            os.set_blocking(child.popen.stdout.fileno(), True)
            while child.output(self.out):
                pass
        with contextlib.suppress(ValueError, OSError):
            child.popen.stdout.close()

    def stop(self) -> int:
        """SIGTERM to every group but the sandbox's, then the sandbox's once the others are gone; SIGKILL
        at the deadline."""
        self.say("stopping")
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not kill the supervisor mid-stop
        deadline = time.monotonic() + STOP_SECONDS
        last = [c for c in self.children if c.stops_last]
        first = [c for c in self.children if c not in last]
        for child in first:
            child.signal_group(signal.SIGTERM)
        self._wait(first, deadline - 3.0)
        for child in last:
            child.signal_group(signal.SIGTERM)
        self._wait(self.children, deadline)
        for child in self.children:
            if child.running:
                self.say(f"{child.name} did not stop within {STOP_SECONDS:g} s; killed")
                child.signal_group(signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.popen.wait(5)
        for child in self.children:
            if child.popen is not None and child.popen.stdout and not child.popen.stdout.closed:
                self._drain(child)
        restarts = ", ".join(f"{c.name} {c.restarts}" for c in self.children)
        self.say(f"stopped (restarts: {restarts})")
        with contextlib.suppress(OSError):
            self.status_path.unlink()
        return 0

    def _wait(self, children: list[Child], until: float) -> None:
        while time.monotonic() < until and any(c.running and c.popen.poll() is None for c in children):
            for key, _ in self.selector.select(timeout=0.2):
                if key.data is not None and not key.data.output(self.out):
                    self.selector.unregister(key.fileobj)


def sandbox_children(sandboxes: list[dict]) -> list[Child]:
    """The providers' sandboxes, as ``python -m delivery.providers.kits embedded`` listed them: each is
    named after its provider and stopped last, once nothing can submit to it any more."""
    return [
        Child(f"{s['provider']}-sandbox", list(s["argv"]), ready_url=s["ready_url"], stops_last=True)
        for s in sandboxes
    ]


def gateway_env(sandboxes: list[dict], environ: dict | None = None) -> None:
    """What the gateway's processes need to reach the sandboxes (base URLs, CA files), for every child to
    inherit; a variable the operator set keeps its value."""
    target = os.environ if environ is None else environ
    for sandbox in sandboxes:
        for name, value in sandbox["gateway_env"].items():
            target.setdefault(name, value)


def children_embedded(args: argparse.Namespace, sandboxes: list[dict]) -> list[Child]:
    venv = Path(sys.executable).parent
    var = Path(args.var_dir)
    # Nothing here uses gunicorn's control socket, and its default path is one per host (a second
    # gunicorn on the host would take it over).
    web = [
        str(venv / "gunicorn"),
        "config.wsgi",
        "--config",
        "python:smsgw.runtime.gunicorn_conf",  # limits and JSON error pages
        "--no-control-socket",
        "--bind",
        f"127.0.0.1:{args.web_port}",
        "--workers",
        "2",
        "--graceful-timeout",
        "20",
        "--access-logfile",
        "-",
        "--logger-class",
        "smsgw.runtime.gunicorn_logging.RedactingLogger",
    ]
    # Five processes: the sweep, receipts, inbound and webhooks ticks each keep one for most of every
    # second (they poll inside it), and sends need the rest; a tick that waits past its expiry is
    # discarded.
    worker = [str(venv / "celery"), "-A", "config", "worker", "--loglevel", "INFO", "--concurrency", "5"]
    worker += ["--hostname", "embedded@%h", "--without-gossip", "--without-mingle", "-Q", args.queues]
    beat = [
        str(venv / "celery"),
        "-A",
        "config",
        "beat",
        "--loglevel",
        "INFO",
        "--pidfile",
        str(var / "beat.pid"),
    ]
    beat += ["--scheduler", "django_celery_beat.schedulers:DatabaseScheduler"]
    return [
        *sandbox_children(sandboxes),
        Child("web", web, ready_url=f"http://127.0.0.1:{args.web_port}/healthz"),
        Child("worker", worker, ready_line=" ready."),
        Child("beat", beat, ready_line="beat: Starting"),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--var-dir", required=True)
    p.add_argument("--web-port", type=int, required=True)
    p.add_argument(
        "--sandboxes",
        required=True,
        help="JSON file: the providers' sandboxes (python -m delivery.providers.kits embedded VAR_DIR)",
    )
    p.add_argument("--queues", required=True, help="comma-separated: every queue the code routes to")
    p.add_argument(
        "--banner", default="", help="printed once every child is ready; @SANDBOXES@: the sandboxes' lines"
    )
    args = p.parse_args(argv)
    sandboxes = json.loads(Path(args.sandboxes).read_text())
    gateway_env(sandboxes)
    banner = args.banner.replace("@SANDBOXES@", "\n".join(f"  {s['banner']}" for s in sandboxes))
    supervisor = Supervisor(children_embedded(args, sandboxes), Path(args.var_dir) / "embedded.json", banner)
    return supervisor.run()


if __name__ == "__main__":
    raise SystemExit(main())
