"""``python -m bench.scenarios.embedded``: the README's first command, ``./deploy/run-embedded.sh``, kept
under load.

It starts the embedded run from this checkout in a fresh folder on free ports (SQLite, the filesystem
broker, the sandbox, gunicorn, a celery worker and beat, under deploy/embedded.py's supervisor), loads
every core with busy-looping processes of its own (``--hogs``), and sends ``--rate`` messages a second
for ``--minutes`` through the API, each to its own recipient, from ``--senders`` From numbers (a long
code is paced at Twilio's 1 segment/s, so one sender could not carry 5 a second). Then it waits for every
message to be final and prints:

* process restarts the supervisor made (target 0), and whether any child is gone at the end;
* messages lost (accepted, not delivered) and duplicated (the sandbox stored more than one submission
  for the recipient), both targets 0;
* lag, ``sent_at - due_at``, p50 / p99 / max, and the POST latency.

It prints figures and asserts nothing (tests/integration/test_embedded_supervision.py runs the same thing
for 20 seconds, 2.5 minutes in the long tier, and asserts). No PostgreSQL or broker needed: only HTTP to
the run it started.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

from bench.harness.embedded import EmbeddedRun, Sender, hogs_start, hogs_stop, outcome, percentile


def soak(*, minutes: float, rate: float, hogs: int, senders: int, settle_seconds: float = 600) -> dict:
    run = EmbeddedRun()
    hog_procs = hogs_start(hogs)
    try:
        started = time.monotonic()
        run.start()
        print(f"embedded run up in {time.monotonic() - started:.1f} s (var {run.var})", flush=True)
        sender_thread = Sender(run, rate, minutes * 60, senders)
        sender_thread.start()
        while sender_thread.is_alive():
            sender_thread.join(60)
            with contextlib.suppress(Exception):
                print(f"  {len(sender_thread.accepted)} accepted, restarts {run.restarts()}", flush=True)
        if sender_thread.error is not None:
            raise sender_thread.error
        result = outcome(run, sender_thread.accepted, settle_seconds)
        result["restarts"] = run.restarts()
        result["children_alive"] = {n: c["pid"] is not None for n, c in run.status()["children"].items()}
        posts = sender_thread.post_seconds
        result["post_p50"], result["post_p99"] = percentile(posts, 50), percentile(posts, 99)
        result["load_average"] = os.getloadavg()
    finally:
        hogs_stop(hog_procs)
        result_stop = run.stop()
    result["stop_seconds"] = result_stop
    result["log"] = str(run.log_path)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scenarios.embedded", description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--rate", type=float, default=5, help="messages per second")
    p.add_argument("--hogs", type=int, default=os.cpu_count() or 2, help="busy processes (default: 1 a core)")
    p.add_argument("--senders", type=int, default=10, help="From numbers the messages rotate over")
    args = p.parse_args(argv)
    r = soak(minutes=args.minutes, rate=args.rate, hogs=args.hogs, senders=args.senders)
    print(f"embedded run, {args.minutes:g} min at {args.rate:g} msg/s, {args.hogs} CPU hogs")
    print(
        f"  load average at the end  {r['load_average'][0]:.1f} / {r['load_average'][1]:.1f} / "
        f"{r['load_average'][2]:.1f}"
    )
    print(f"  process restarts         {sum(r['restarts'].values())}  {r['restarts']}")
    print(f"  children alive at end    {r['children_alive']}")
    print(f"  messages accepted        {r['accepted']}   final statuses {r['statuses']}")
    print(f"  lost                     {r['lost']}   (never submitted: {r['never_submitted']})")
    print(f"  duplicated               {r['duplicated']}")
    print(f"  through the standby leg  {r['through_standby']}")
    print(
        f"  lag sent_at - due_at     p50 {r['lag_p50']:.2f} s, p99 {r['lag_p99']:.2f} s, "
        f"max {r['lag_max']:.2f} s"
    )
    print(f"  POST /v1/messages        p50 {r['post_p50'] * 1000:.0f} ms, p99 {r['post_p99'] * 1000:.0f} ms")
    print(f"  stopped (SIGTERM) in     {r['stop_seconds']:.1f} s")
    print(f"  log                      {r['log']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
