"""``python -m bench sdk``: what one submission costs the send process inside the official twilio SDK, by the
ways of calling it that keep the SDK as the provider client (issue 24: "measure alternatives that keep the
official SDK ... its lower-level request API, a lighter response path, HTTP keep-alive and pool sizing").

Each variant sends ``--requests`` messages to the sandbox (a real HTTP server in its own process, as in
every benchmark) with ``--in-flight`` requests at a time, from one uvloop event loop in this process, as
a send process's adapter thread does. The figure is this process's CPU per request (user + system, the
whole process), beside the sandbox's CPU per request and the rate. The variants run round-robin
``--rounds`` times in one run, so each is measured beside the others on the same machine state:

* ``adapter``: the adapter's own call (``_AsyncRuntime.create_message``): the SDK's lower-level request
  API, ``client.api.v2010.create_async("POST", "/Accounts/{sid}/Messages.json", data=...)``, through the
  gateway's HTTP client (delivery.providers.twilio.http.BaseUrlAsyncHttpClient: one pooled aiohttp
  session, keep-alive). The same request and the same TwilioRestException on an error answer as the
  resource method, with the answer kept as the parsed JSON: the lighter response path.
* ``messages_create_async``: the SDK's resource method, ``client.messages.create_async(...)``, which also
  runs ``values.of`` over its 27 parameters and builds a ``MessageInstance`` (dates, prices): the
  adapter's call until issue 24.
* ``http_client``: the SDK's HTTP client alone (``http_client.request``), the JSON parsed here: the floor
  of any path through the SDK, for reference.
* ``messages_create_async_stock_client``: the resource method through the SDK's own
  ``AsyncTwilioHttpClient`` as shipped (``pool_connections=True``, its logging, aiohttp's defaults): the
  SDK as a newcomer would call it, for what the gateway's client saves.
* ``adapter_no_keepalive``: the adapter's call with a new connection per request (``force_close``).
* ``adapter_pool_N``: the adapter's call with its connection pool capped at N (``--pools``), the
  requests in flight unchanged: pool sizing.

The sandbox is given no StatusCallback, so it posts no callbacks back.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.harness.sampling import tree_cpu_seconds

# The SDK is reached only through the provider package (pyproject.toml, the import contracts): the
# adapter's own client construction, and the SDK's stock HTTP client as that module imports it.
from delivery.providers.twilio import http as twilio_http
from delivery.providers.twilio.client import _AsyncRuntime, _Conf
from delivery.providers.twilio.client import _client as adapter_client
from delivery.providers.twilio.http import BaseUrlAsyncHttpClient, new_loop


def _own_cpu() -> float:
    """This process alone (the sandbox is its child: bench.harness.sampling.tree_cpu_seconds would count
    it too), from the kernel's own CPU clock for the process (nanoseconds), not /proc's ticks: a short run
    (the test's 30 requests) can use less than one 10-ms tick, which read as no CPU at all."""
    return time.process_time()


class _NoKeepAlive(BaseUrlAsyncHttpClient):
    """The gateway's client with a new connection for every request."""

    def _connector_options(self) -> dict[str, Any]:
        options = super()._connector_options()
        del options["keepalive_timeout"]  # aiohttp refuses one with force_close
        return {**options, "force_close": True}


def _conf(sandbox, concurrency: int) -> _Conf:
    return _Conf(
        account_sid=sandbox.account_sid,
        auth_token=sandbox.auth_token,
        base_url=sandbox.base_url,
        api_key_sid="",
        api_key_secret="",
        timeout=10.0,
        concurrency=concurrency,
    )


def _variants(sandbox, in_flight: int, pools: list[int]) -> dict[str, Callable[[], tuple]]:
    """name -> a factory of (send(i) coroutine function, close coroutine function), called on the loop."""
    sid = sandbox.account_sid

    def form(i: int) -> dict[str, str]:
        return {"To": f"+1415{6000000 + i % 1000000:07d}", "From": "+14155550100", "Body": f"sdk bench {i}"}

    def adapter(pool: int = in_flight, http_class=BaseUrlAsyncHttpClient) -> tuple:
        """The adapter's own runtime and call, ``_AsyncRuntime.create_message``; ``pool``: its connection
        pool's cap (the adapter sizes it by the requests in flight)."""
        # The runtime sizes its pool by its concurrency; the requests in flight are _run's gate.
        runtime = _AsyncRuntime(_conf(sandbox, pool), asyncio.get_running_loop())
        if http_class is not BaseUrlAsyncHttpClient:
            runtime.http = http_class(base_url=sandbox.base_url, timeout=10.0, max_connections=pool)
            runtime.client = adapter_client(runtime.conf, runtime.http)

        async def send(i: int) -> str:
            return (await runtime.create_message(form(i)))["sid"]

        return send, runtime.http.close

    def resource_method(http=None) -> tuple:
        """``client.messages.create_async(to=, from_=, body=)``: the SDK's resource method."""
        http = http or BaseUrlAsyncHttpClient(
            base_url=sandbox.base_url, timeout=10.0, max_connections=in_flight
        )
        client = adapter_client(_conf(sandbox, in_flight), http)
        if not isinstance(http, BaseUrlAsyncHttpClient):
            client.api.base_url = sandbox.base_url  # the stock client has no base URL of its own

        async def send(i: int) -> str:
            f = form(i)
            return (await client.messages.create_async(to=f["To"], from_=f["From"], body=f["Body"])).sid

        return send, http.close

    def http_client() -> tuple:
        http = BaseUrlAsyncHttpClient(base_url=sandbox.base_url, timeout=10.0, max_connections=in_flight)
        # The URL the SDK builds, rewritten to the sandbox by the client as in the adapter.
        url = f"https://api.twilio.com/2010-04-01/Accounts/{sid}/Messages.json"

        async def send(i: int) -> str:
            response = await http.request("POST", url, data=form(i), auth=(sid, sandbox.auth_token))
            return json.loads(response.text)["sid"]

        return send, http.close

    out: dict[str, Callable[[], tuple]] = {
        "adapter": adapter,
        "messages_create_async": resource_method,
        "http_client": http_client,
        "messages_create_async_stock_client": lambda: resource_method(
            twilio_http.AsyncTwilioHttpClient(pool_connections=True, timeout=10.0)
        ),
        "adapter_no_keepalive": lambda: adapter(http_class=_NoKeepAlive),
    }
    for n in pools:
        out[f"adapter_pool_{n}"] = lambda n=n: adapter(pool=n)
    return out


async def _made(make: Callable[[], tuple]) -> tuple:
    return make()


async def _run(send: Callable[[int], Awaitable[str]], start: int, n: int, in_flight: int) -> int:
    gate = asyncio.Semaphore(in_flight)
    sids: list[str] = []

    async def one(i: int) -> None:
        async with gate:
            sids.append(await send(i))

    await asyncio.gather(*(one(start + i) for i in range(n)))
    return sum(1 for s in sids if s.startswith("SM"))


def _rounds(loop, sandbox, requests: int, in_flight: int, rounds: int, pools: list[int], warmup: int) -> dict:
    """Every variant once a round, round-robin: name -> one result per round."""
    provider = sandbox.process.pid
    runs: dict[str, list[dict]] = {}
    counter = 0
    for _ in range(rounds):
        for name, make in _variants(sandbox, in_flight, pools).items():
            send, close = loop.run_until_complete(_made(make))  # the stock client wants a running loop
            loop.run_until_complete(_run(send, counter, warmup, in_flight))  # pool and SDK warm
            counter += warmup
            cpu0, sandbox0, t0 = _own_cpu(), tree_cpu_seconds(provider), time.perf_counter()
            accepted = loop.run_until_complete(_run(send, counter, requests, in_flight))
            elapsed = time.perf_counter() - t0
            cpu1, sandbox1 = _own_cpu(), tree_cpu_seconds(provider)
            counter += requests
            loop.run_until_complete(close())
            runs.setdefault(name, []).append(
                {
                    "accepted": accepted,
                    "requests_per_s": round(requests / elapsed),
                    "client_cpu_ms_per_request": round((cpu1 - cpu0) * 1000 / requests, 4),
                    "sandbox_cpu_ms_per_request": round((sandbox1 - sandbox0) * 1000 / requests, 4),
                }
            )
    return runs


def sdk(
    *, requests: int, in_flight: int, rounds: int, latency_ms: int, pools: list[int], warmup: int
) -> dict:
    from delivery.providers.twilio.sandbox.process import TwilioSandboxProcess

    prefix = ["nice", "-n", "-10"] if os.geteuid() == 0 else []
    loop = new_loop()
    try:
        with TwilioSandboxProcess(
            extra_args=["--latency-ms", str(latency_ms)], command_prefix=prefix
        ) as sandbox:
            runs = _rounds(loop, sandbox, requests, in_flight, rounds, pools, warmup)
            submissions = sandbox.stats()["submissions"]
    finally:
        loop.close()
    # Medians over the rounds: one run's CPU moves by a third on this shared machine, the median of five
    # much less. Each ratio is to the adapter's median in the same run.
    median = {
        name: statistics.median(r["client_cpu_ms_per_request"] for r in rs) for name, rs in runs.items()
    }
    summary = {
        name: {
            "client_cpu_ms_per_request_median": round(median[name], 4),
            "sandbox_cpu_ms_per_request_median": round(
                statistics.median(r["sandbox_cpu_ms_per_request"] for r in rs), 4
            ),
            "requests_per_s_median": round(statistics.median(r["requests_per_s"] for r in rs)),
            "ratio_to_adapter": round(median[name] / median["adapter"], 3),
        }
        for name, rs in runs.items()
    }
    return {
        "scenario": "sdk",
        "requests_per_run": requests,
        "in_flight": in_flight,
        "rounds": rounds,
        "sandbox_latency_ms": latency_ms,
        "sandbox_submissions": submissions,  # every request of every run, warm-ups included
        "summary": summary,
        "runs": runs,
    }
