"""The HTTP load a scenario puts on gunicorn (``ingest``, ``facade``): ``wrk`` with its Lua script when it
is on the PATH, else a Python client in this process; a few warm-up requests first, and the CPU the web
and PostgreSQL spent a request while it ran."""

from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import urlencode

from bench.harness.sampling import CpuByRole

# wrk's Lua script for ``ingest`` and ``facade``: in "post" mode every request gets its own JSON body
# (recipient and text vary) and the API key as a Bearer header; in "form" mode (bench/scenarios/facade.py)
# its own form body as Twilio's SDKs send it (``To``, ``From``, ``Body``) with HTTP Basic credentials (the
# first argument, already base64) and the From number (the third). Each wrk thread numbers its requests
# from its own offset so bodies never repeat. In "get" mode it sends plain GETs of the URL (``/healthz``,
# the web stack's own ceiling). In "batch" mode every request is a POST /v1/messages/batch of the fourth
# argument's count of distinct messages. The status codes seen are counted per thread and collected in
# done().
WRK_SCRIPT = r"""
local key = nil
local mode = "post"
local sender = ""
local items = 1
local counter = 0
local threads = {}
offset = 0 -- a global: setup() sets it per thread
codes = {}

function setup(thread)
  thread:set("offset", #threads * 100000000)
  table.insert(threads, thread)
end

function init(args)
  key = args[1]
  mode = args[2] or "post"
  sender = string.gsub(args[3] or "", "%+", "%%2B")
  items = tonumber(args[4]) or 1
  offset = tonumber(offset) or 0
  if mode == "post" or mode == "batch" then
    wrk.method = "POST"
    wrk.headers["Content-Type"] = "application/json"
    wrk.headers["Authorization"] = "Bearer " .. key
  elseif mode == "form" then
    wrk.method = "POST"
    wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
    wrk.headers["Authorization"] = "Basic " .. key
  end
end

function request()
  if mode == "get" then
    return wrk.format("GET")
  end
  counter = counter + 1
  local n = offset + counter
  local body
  if mode == "batch" then
    local parts = {}
    for i = 1, items do
      local m = n * items + i
      parts[i] = string.format('{"to": "+1415%07d", "body": "batch %d"}', 2000000 + m % 1000000, m)
    end
    body = '{"messages": [' .. table.concat(parts, ", ") .. ']}'
  elseif mode == "form" then
    body = string.format("To=%%2B1415%07d&From=%s&Body=facade+%d", 5000000 + n % 1000000, sender, n)
  else
    body = string.format('{"to": "+1415%07d", "body": "ingest %d"}', 2000000 + n % 1000000, n)
  end
  return wrk.format(nil, nil, nil, body)
end

function response(status, headers, body)
  codes[status] = (codes[status] or 0) + 1
end

function done(summary, latency, requests)
  local merged = {}
  for _, t in ipairs(threads) do
    local c = t:get("codes")
    for status, n in pairs(c) do merged[tostring(status)] = (merged[tostring(status)] or 0) + n end
  end
  local parts = {}
  for status, n in pairs(merged) do table.insert(parts, string.format('"%s": %d', status, n)) end
  local e = summary.errors
  io.write(string.format(
    'WRK_RESULT {"requests": %d, "duration_us": %d, "latency_us_p50": %d, "latency_us_p99": %d, ' ..
    '"errors": {"connect": %d, "read": %d, "write": %d, "timeout": %d}, "codes": {%s}}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect, e.read, e.write, e.timeout, table.concat(parts, ", ")))
end
"""


def ingest_wrk(
    wrk: str,
    url: str,
    key: str,
    *,
    seconds: int,
    concurrency: int,
    method: str = "POST",
    sender: str = "",
    items: int = 1,
) -> dict:
    """One bounded wrk run against ``url`` (loopback): distinct JSON bodies (POST), batches of ``items``
    distinct messages (BATCH), distinct form bodies (FORM: ``key`` is the base64 Basic credential,
    ``sender`` the From number) or plain GETs, latency from wrk's histogram."""
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile("w", prefix="smsgw-ingest-", suffix=".lua") as script:
        script.write(WRK_SCRIPT)
        script.flush()
        # One wrk thread: it needs a fraction of a core, and every other cycle goes to the server.
        argv = [wrk, "-t1", f"-c{concurrency}", f"-d{seconds}s", "--timeout", "10s", "-s", script.name]
        out = subprocess.run(
            [*argv, url, "--", key, method.lower(), sender, str(items)],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
            check=True,
        ).stdout
    line = next((ln for ln in out.splitlines() if ln.startswith("WRK_RESULT ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result:\n{out}")
    res = json.loads(line.removeprefix("WRK_RESULT "))
    errors = {k: v for k, v in res["errors"].items() if v}
    return {
        "elapsed": res["duration_us"] / 1e6,
        "requests": res["requests"],
        "codes": {int(k): v for k, v in sorted(res["codes"].items())},
        "p50_ms": res["latency_us_p50"] / 1000,
        "p99_ms": res["latency_us_p99"] / 1000,
        **({"socket_errors": errors} if errors else {}),
    }


def ingest_python(
    url: str,
    key: str,
    *,
    seconds: float,
    concurrency: int,
    method: str = "POST",
    sender: str = "",
    items: int = 1,
) -> dict:
    """The fallback load generator (aiohttp, in this process): it shares the cores with the server, so
    it understates what the server sustains. ``method`` GET sends plain GETs of ``url``; FORM sends
    Twilio's form bodies with ``key`` as the base64 Basic credential and ``sender`` as From; BATCH sends
    batches of ``items`` messages."""
    import aiohttp

    latencies: list[float] = []
    codes: dict[int, int] = {}

    def body_of(i: int) -> str | None:
        if method == "FORM":
            return urlencode(
                {"To": f"+1415{5000000 + i % 1000000:07d}", "From": sender, "Body": f"facade {i}"}
            )
        if method == "POST":
            return json.dumps({"to": f"+1415{2000000 + i % 1000000:07d}", "body": f"ingest {i}"})
        if method == "BATCH":
            numbers = range(i * items + 1, (i + 1) * items + 1)
            return json.dumps(
                {
                    "messages": [
                        {"to": f"+1415{2000000 + m % 1000000:07d}", "body": f"batch {m}"} for m in numbers
                    ]
                }
            )
        return None

    async def run():
        headers = (
            {"Authorization": f"Basic {key}", "Content-Type": "application/x-www-form-urlencoded"}
            if method == "FORM"
            else {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        )
        stop_at = time.monotonic() + seconds
        counter = iter(range(10**9))
        async with aiohttp.ClientSession(
            headers=headers, connector=aiohttp.TCPConnector(limit=concurrency)
        ) as session:

            async def client():
                while time.monotonic() < stop_at:
                    body = body_of(next(counter))
                    started = time.perf_counter()
                    async with session.request("GET" if method == "GET" else "POST", url, data=body) as resp:
                        await resp.read()
                        codes[resp.status] = codes.get(resp.status, 0) + 1
                    latencies.append(time.perf_counter() - started)

            await asyncio.gather(*(client() for _ in range(concurrency)))

    started = time.perf_counter()
    asyncio.run(run())
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "elapsed": elapsed,
        "requests": len(latencies),
        "codes": codes,
        "p50_ms": 1000 * latencies[len(latencies) // 2] if latencies else None,
        "p99_ms": 1000 * latencies[max(0, int(len(latencies) * 0.99) - 1)] if latencies else None,
    }


def ingest_warmup(port: int, key: str, workers: int, threads: int) -> int:
    """A few sequential requests per worker so each has its connection and lazy imports in place."""
    import http.client

    n = 8 * workers * max(1, threads)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    for i in range(n):
        body = json.dumps({"to": f"+1415{3000000 + i:07d}", "body": f"warm-up {i}"})
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("POST", "/v1/messages", body=body, headers=headers)
            resp = conn.getresponse()
            resp.read()
            if resp.status != 201:
                raise RuntimeError(f"warm-up request failed: {resp.status}")
        finally:
            conn.close()
    return n


def with_cpu(web_pid: int, load) -> dict:
    """``load()``'s result with the CPU the web (the gunicorn tree) and PostgreSQL spent a request
    while it ran: rates move with whatever else the two cores do, the cost of a request much less."""
    cpu = CpuByRole({"web": [web_pid]})
    cpu.start()
    out = load()
    used = cpu.stop()
    n = max(1, out["requests"])
    per_request = {
        f"{role}_cpu_ms_per_request": round(used["cpu_seconds_by_role"][role] * 1000 / n, 3)
        for role in ("web", "postgresql")
    }
    return {**out, "cpu": {**per_request, "cores_busy_machine": used["cores_busy_machine"]}}
