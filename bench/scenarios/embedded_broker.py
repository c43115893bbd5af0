"""``python -m bench.scenarios.embedded_broker``: kombu's filesystem transport as shipped against smsgw's
(smsgw.runtime.transports.FilesystemTransport), in the same run, on the same folder layout.

Two figures per transport:

* **race**: ``--publishers`` processes publish ``--messages`` each while one consumer reads, as beat, the
  web processes and the worker share the embedded broker. Counted: messages read, and reads that failed
  (kombu's ``JSONDecodeError`` on a file still empty: kombu#1551; the stock consumer is restarted after
  each, as a dying worker would be), and for smsgw's, files set aside. A stock consumer that hits the
  window stops (in a worker: "Unrecoverable error", the process exits).
* **throughput**: publish then consume ``--messages`` with nothing else running, messages a second each
  way, and the ratio smsgw / stock.

Prints figures; asserts nothing. Needs nothing but the checkout's .venv.
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from pathlib import Path

from kombu import Connection, Queue

STOCK = "kombu.transport.filesystem:Transport"
OURS = "smsgw.runtime.transports:FilesystemTransport"
PAYLOAD = {"task": "delivery.send_batch", "ids": list(range(250)), "pad": "x" * 600}


def _options(root: Path) -> dict:
    for name in ("out", "control", "processed"):
        (root / name).mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(root / "out"),
        "data_folder_out": str(root / "out"),
        "control_folder": str(root / "control"),
        "processed_folder": str(root / "processed"),
        "store_processed": False,
    }


def _connection(transport: str, root: Path) -> Connection:
    # transport= is honoured because the URL has no scheme of its own here.
    return Connection(transport=transport, transport_options=_options(root))


def _publish(transport: str, root: str, n: int) -> None:
    with _connection(transport, Path(root)) as conn:
        producer = conn.Producer(channel=conn.default_channel)
        for _ in range(n):
            producer.publish(PAYLOAD, routing_key="bench", serializer="json")


def race(transport: str, publishers: int, messages: int) -> dict:
    root = Path(tempfile.mkdtemp(prefix="smsgw-broker-race-"))
    queue = Queue("bench", routing_key="bench")
    with _connection(transport, root) as conn:
        queue(conn.default_channel).declare()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_publish, args=(transport, str(root), messages)) for _ in range(publishers)]
    read = failures = 0
    started = time.monotonic()
    for proc in procs:
        proc.start()
    conn = _connection(transport, root)
    bound = queue(conn.default_channel)
    while True:
        try:
            message = bound.get(no_ack=True)
        except ValueError:  # JSONDecodeError: the stock consumer read a file still being written
            failures += 1
            conn.release()
            conn = _connection(transport, root)  # what a restarted worker would do
            bound = queue(conn.default_channel)
            continue
        if message is not None:
            read += 1
        elif not any(p.is_alive() for p in procs) and not any((root / "out").iterdir()):
            break
    conn.release()
    for proc in procs:
        proc.join()
    bad = root / "bad"
    return {
        "published": publishers * messages,
        "read": read,
        "failures": failures,
        "set_aside": len(list(bad.iterdir())) if bad.exists() else 0,
        "seconds": time.monotonic() - started,
    }


def throughput(transport: str, messages: int) -> dict:
    root = Path(tempfile.mkdtemp(prefix="smsgw-broker-rate-"))
    queue = Queue("bench", routing_key="bench")
    with _connection(transport, root) as conn:
        bound = queue(conn.default_channel)
        bound.declare()
        producer = conn.Producer(channel=conn.default_channel)
        t0 = time.perf_counter()
        for _ in range(messages):
            producer.publish(PAYLOAD, routing_key="bench", serializer="json")
        t1 = time.perf_counter()
        got = 0
        while bound.get(no_ack=True) is not None:
            got += 1
        t2 = time.perf_counter()
    return {"publish_per_s": messages / (t1 - t0), "consume_per_s": got / (t2 - t1), "consumed": got}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.scenarios.embedded_broker", description=__doc__.split("\n")[0]
    )
    p.add_argument("--publishers", type=int, default=3)
    p.add_argument("--messages", type=int, default=3000, help="per publisher (race) and in all (throughput)")
    p.add_argument("--rounds", type=int, default=3, help="throughput rounds, alternating the transports")
    args = p.parse_args(argv)
    print(f"race: {args.publishers} publishers x {args.messages} messages, one consumer")
    for name, transport in (("kombu", STOCK), ("smsgw", OURS)):
        r = race(transport, args.publishers, args.messages)
        print(
            f"  {name:<6} read {r['read']}/{r['published']}, consumer failures {r['failures']}, "
            f"set aside {r['set_aside']}, {r['seconds']:.1f} s"
        )
    totals = {STOCK: [0.0, 0.0], OURS: [0.0, 0.0]}
    print(f"throughput: {args.messages} messages, {args.rounds} rounds alternating")
    for _ in range(args.rounds):
        for transport in (STOCK, OURS):
            r = throughput(transport, args.messages)
            totals[transport][0] += r["publish_per_s"]
            totals[transport][1] += r["consume_per_s"]
    for name, transport in (("kombu", STOCK), ("smsgw", OURS)):
        pub, con = (v / args.rounds for v in totals[transport])
        print(f"  {name:<6} publish {pub:,.0f}/s   consume {con:,.0f}/s")
    print(
        f"  ratio smsgw/kombu: publish {totals[OURS][0] / totals[STOCK][0]:.2f}, "
        f"consume {totals[OURS][1] / totals[STOCK][1]:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
