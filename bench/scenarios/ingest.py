"""``python -m bench ingest``: POST /v1/messages through gunicorn, then batches, then GET /healthz on the
same server with the same client (docs/running-benchmarks.md)."""

from __future__ import annotations

import os
from functools import partial

from bench.harness import data, devprocs
from bench.harness.load import ingest_python, ingest_warmup, ingest_wrk, with_cpu
from scheduling.models import Message
from smsgw.models import api_key_create


def ingest(
    *,
    seconds: int,
    concurrency: int,
    web_workers: int,
    threads: int,
    healthz: bool = True,
    batch: int = 0,
    env_extra: dict[str, str] | None = None,
) -> dict:
    """POST /v1/messages through gunicorn, then (``batch`` > 0) POST /v1/messages/batch of ``batch``
    messages a request, then (unless ``healthz`` is off) GET /healthz against the same gunicorn process
    with the same client and settings: the ratios say how much of the web stack's ceiling the API's own
    work leaves, and how many more messages a second a batch takes in. The load comes from ``wrk`` when
    it is on PATH (a C client that leaves the cores to the server), else from the Python client;
    SMSGW_BENCH_CLIENT=python forces the latter. The result names the client used."""
    import shutil

    tenant = data.bench_reset()
    _, key = api_key_create(tenant=tenant, name="bench")
    port = devprocs.free_port()
    env = {**os.environ, **(env_extra or {})}
    web = devprocs.gunicorn(env, port=port, workers=web_workers, threads=threads)
    url = f"http://127.0.0.1:{port}/v1/messages"
    worker_class = web.worker_class
    wrk = None if os.environ.get("SMSGW_BENCH_CLIENT") == "python" else shutil.which("wrk")
    try:
        warmup = ingest_warmup(port, key, web_workers, threads)
        client = (
            partial(ingest_wrk, wrk, seconds=seconds, concurrency=concurrency)
            if wrk
            else partial(ingest_python, seconds=seconds, concurrency=concurrency)
        )
        run = with_cpu(web.pid, lambda: client(url, key))
        stored = Message.objects.filter(tenant=tenant).count() - warmup
        batched = (
            with_cpu(web.pid, lambda: client(f"{url}/batch", key, method="BATCH", items=batch))
            if batch
            else None
        )
        health = (
            with_cpu(web.pid, lambda: client(f"http://127.0.0.1:{port}/healthz", key, method="GET"))
            if healthz
            else None
        )
    finally:
        web.stop()
    stored_batch = Message.objects.filter(tenant=tenant).count() - warmup - stored
    return {
        "scenario": "ingest",
        "client": "wrk" if wrk else "python-aiohttp",
        "seconds": round(run["elapsed"], 2),
        "requests": run["requests"],
        "requests_per_s": run["requests"] / run["elapsed"],
        "status_codes": run["codes"],
        **({"socket_errors": run["socket_errors"]} if "socket_errors" in run else {}),
        "stored": stored,
        "latency_ms_p50": run["p50_ms"],
        "latency_ms_p99": run["p99_ms"],
        **run["cpu"],
        "web_workers": web_workers,
        "threads": threads,
        "worker_class": worker_class,
        "client_concurrency": concurrency,
        "warmup_requests": warmup,
        **(_batch_summary(run, batched, batch, stored_batch, health) if batched else {}),
        **(_healthz_summary(run, health) if health else {}),
    }


def _batch_summary(post: dict, batched: dict, items: int, stored: int, health: dict | None) -> dict:
    post_rate = post["requests"] / post["elapsed"]
    requests_rate = batched["requests"] / batched["elapsed"]
    answered = batched["codes"].get(200, 0)
    return {
        "batch": {
            "messages_per_request": items,
            "seconds": round(batched["elapsed"], 2),
            "requests": batched["requests"],
            "requests_per_s": requests_rate,
            "messages_per_s": requests_rate * items,
            "status_codes": batched["codes"],
            **({"socket_errors": batched["socket_errors"]} if "socket_errors" in batched else {}),
            # wrk stops with up to one request per connection in flight, which may still be stored: up
            # to concurrency x items beyond the answered ones.
            "stored": stored,
            "stored_beyond_answered": stored - answered * items,
            "latency_ms_p50": batched["p50_ms"],
            "latency_ms_p99": batched["p99_ms"],
            **batched.get("cpu", {}),
        },
        # Messages a second taken in by batches over those taken in one request each, same run.
        "ratio_batch_messages_to_post": round(requests_rate * items / post_rate, 2) if post_rate else None,
        **(
            {
                "ratio_batch_messages_to_healthz": round(
                    requests_rate * items * health["elapsed"] / health["requests"], 2
                )
            }
            if health and health["requests"]
            else {}
        ),
    }


def _healthz_summary(post: dict, health: dict) -> dict:
    post_rate, health_rate = post["requests"] / post["elapsed"], health["requests"] / health["elapsed"]
    return {
        "healthz": {
            "seconds": round(health["elapsed"], 2),
            "requests": health["requests"],
            "requests_per_s": health_rate,
            "status_codes": health["codes"],
            **({"socket_errors": health["socket_errors"]} if "socket_errors" in health else {}),
            "latency_ms_p50": health["p50_ms"],
            "latency_ms_p99": health["p99_ms"],
            **health.get("cpu", {}),
        },
        # Target (docs/benchmarks.md): >= 0.2, an accepted message costs at most five health checks.
        "ratio_post_to_healthz": round(post_rate / health_rate, 3) if health_rate else None,
    }
