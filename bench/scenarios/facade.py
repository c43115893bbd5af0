"""``python -m bench facade`` (docs/benchmarks.md, "The Twilio-compatible API"): ``POST
/2010-04-01/Accounts/{AccountSid}/Messages.json`` (scheduling.facade: Twilio's form body, HTTP Basic with
the tenant's account SID and an API key) beside ``POST /v1/messages`` (JSON, Bearer), through the same
gunicorn in the same run, with the client and settings of ``bench ingest`` (bench/harness/load.py). The
two sides alternate (``--rounds``; the order swaps each round, so neither always runs first on a warmer
or a fuller table). It prints each side's rate, latency, answers other than 2xx and messages stored, and
the ratio facade / v1 (target >= 0.9)."""

from __future__ import annotations

import base64
import http.client
import os
import shutil
from functools import partial
from urllib.parse import urlencode

from bench.harness import devprocs
from bench.harness.data import bench_reset
from bench.harness.figures import say
from bench.harness.load import ingest_python, ingest_warmup, ingest_wrk
from scheduling.models import Message
from smsgw.models import api_key_create

SIDES = ("v1", "facade")
# The bodies each side's client sends start with these (bench/harness/load.py's wrk script and Python client);
# the warm-up requests' bodies start with "warm-up", so neither count includes them.
BODY_PREFIX = {"v1": "ingest ", "facade": "facade "}
TARGET_RATIO = 0.9


def facade_path(account_sid: str) -> str:
    return f"/2010-04-01/Accounts/{account_sid}/Messages.json"


def basic_credential(account_sid: str, key: str) -> str:
    """HTTP Basic as Twilio's SDKs send it: the account SID as username, the auth token (here one of the
    tenant's API keys, smsgw.tenancy.auth.basic_verify) as password."""
    return base64.b64encode(f"{account_sid}:{key}".encode()).decode()


def _facade_warmup(port: int, path: str, credential: str, sender: str, workers: int, threads: int) -> int:
    """As ``ingest_warmup``, through the facade's view: its imports and first queries before the clock."""
    n = 8 * workers * max(1, threads)
    headers = {"Authorization": f"Basic {credential}", "Content-Type": "application/x-www-form-urlencoded"}
    for i in range(n):
        body = urlencode({"To": f"+1415{6000000 + i:07d}", "From": sender, "Body": f"warm-up facade {i}"})
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("POST", path, body=body, headers=headers)
            resp = conn.getresponse()
            resp.read()
            if resp.status != 201:
                raise RuntimeError(f"facade warm-up request failed: {resp.status}")
        finally:
            conn.close()
    return n


def side_summary(runs: list[dict], stored: int) -> dict:
    """One side's runs together: the rate over all its seconds, the answers by status, those outside 2xx
    (target 0), each run's latency percentiles (wrk gives them per run), and the messages stored against
    the 2xx answers. wrk stops at its deadline with up to one request in flight per connection: those
    may be stored without their answer counted, so ``stored`` can exceed the 2xx answers by at most the
    connections, once per run (the Python client waits for its last answers: there they are equal)."""
    requests = sum(r["requests"] for r in runs)
    elapsed = sum(r["elapsed"] for r in runs)
    codes: dict[int, int] = {}
    for r in runs:
        for status, n in r["codes"].items():
            codes[int(status)] = codes.get(int(status), 0) + n
    ok = sum(n for status, n in codes.items() if 200 <= status < 300)
    socket_errors: dict[str, int] = {}
    for r in runs:
        for kind, n in r.get("socket_errors", {}).items():
            socket_errors[kind] = socket_errors.get(kind, 0) + n
    return {
        "seconds": round(elapsed, 2),
        "requests": requests,
        "requests_per_s": round(requests / elapsed, 1) if elapsed else None,
        "status_codes": dict(sorted(codes.items())),
        "non_2xx": requests - ok,
        **({"socket_errors": socket_errors} if socket_errors else {}),
        "latency_ms_p50_per_run": [round(r["p50_ms"], 2) for r in runs if r["p50_ms"] is not None],
        "latency_ms_p99_per_run": [round(r["p99_ms"], 2) for r in runs if r["p99_ms"] is not None],
        "answered_2xx": ok,
        "stored": stored,
        "stored_minus_2xx": stored - ok,
        "per_run_requests_per_s": [round(r["requests"] / r["elapsed"], 1) for r in runs if r["elapsed"]],
    }


def ratio(result: dict) -> float | None:
    v1, fac = result["v1"]["requests_per_s"], result["facade"]["requests_per_s"]
    return round(fac / v1, 3) if v1 and fac is not None else None


def summary_lines(result: dict) -> list[str]:
    lines = [
        f"== bench facade: {result['rounds']} round(s) of {result['seconds_per_run']} s per side, "
        f"{result['client']}, {result['client_concurrency']} connections, gunicorn {result['worker_class']} "
        f"x{result['web_workers']} (threads {result['threads']})"
    ]
    for side in SIDES:
        s = result[side]
        p50 = "/".join(f"{v:g}" for v in s["latency_ms_p50_per_run"])
        p99 = "/".join(f"{v:g}" for v in s["latency_ms_p99_per_run"])
        lines.append(
            f"{side:>6}: {s['requests_per_s']} req/s ({s['requests']} in {s['seconds']} s), "
            f"p50 {p50} ms, p99 {p99} ms, non-2xx {s['non_2xx']}, "
            f"stored {s['stored']} for {s['answered_2xx']} answered 2xx (+{s['stored_minus_2xx']})"
            + (f", socket errors {s['socket_errors']}" if "socket_errors" in s else "")
        )
    lines.append(f" ratio facade / v1: {result['ratio_facade_to_v1']} (target >= {TARGET_RATIO})")
    return lines


def facade(
    *,
    seconds: int,
    concurrency: int,
    web_workers: int,
    threads: int,
    rounds: int = 2,
    env: dict[str, str] | None = None,
) -> dict:
    """Both APIs through one gunicorn (devprocs.gunicorn, as ``bench ingest`` starts it), one tenant and
    one API key; ``rounds`` pairs of runs of ``seconds`` each, the order swapped every round. ``env``:
    the web server's environment (default: this process's; the tests point it at their database)."""
    tenant = bench_reset()
    _, key = api_key_create(tenant=tenant, name="bench")
    account_sid = tenant.facade_account_sid
    sender = tenant.default_from or "+14155550100"
    credential = basic_credential(account_sid, key)
    port = devprocs.free_port()
    web = devprocs.gunicorn(env or dict(os.environ), port=port, workers=web_workers, threads=threads)
    base = f"http://127.0.0.1:{port}"
    wrk = None if os.environ.get("SMSGW_BENCH_CLIENT") == "python" else shutil.which("wrk")
    client = (
        partial(ingest_wrk, wrk, seconds=seconds, concurrency=concurrency)
        if wrk
        else partial(ingest_python, seconds=seconds, concurrency=concurrency)
    )
    calls = {
        "v1": partial(client, f"{base}/v1/messages", key),
        "facade": partial(
            client, f"{base}{facade_path(account_sid)}", credential, method="FORM", sender=sender
        ),
    }
    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    try:
        warmup = ingest_warmup(port, key, web_workers, threads)
        warmup += _facade_warmup(port, facade_path(account_sid), credential, sender, web_workers, threads)
        for r in range(rounds):
            for side in SIDES if r % 2 == 0 else tuple(reversed(SIDES)):
                say(f"facade bench: round {r + 1}, {side}")
                runs[side].append(calls[side]())
    finally:
        web.stop()
    mine = Message.objects.filter(tenant=tenant)
    result = {
        "scenario": "facade",
        "client": "wrk" if wrk else "python-aiohttp",
        "rounds": rounds,
        "seconds_per_run": seconds,
        "client_concurrency": concurrency,
        "web_workers": web_workers,
        "threads": threads,
        "worker_class": web.worker_class,
        "warmup_requests": warmup,
        **{
            side: side_summary(runs[side], mine.filter(body__startswith=BODY_PREFIX[side]).count())
            for side in SIDES
        },
    }
    # Target (docs/benchmarks.md): >= 0.9, the Twilio-shaped endpoint costs at most a tenth more.
    result["ratio_facade_to_v1"] = ratio(result)
    for line in summary_lines(result):
        say(line)
    return result
