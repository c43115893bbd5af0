"""Benchmark scenarios (docs/running-benchmarks.md). Run through ``python -m bench``; they print figures
and never assert. They need PostgreSQL (DATABASE_URL) and a real broker (CELERY_BROKER_URL), and they
start their own sandbox, beat and workers as real processes, exactly as production runs them."""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from urllib.parse import urlencode

import psutil
from django.conf import settings
from django.db import connection
from django.utils import timezone

from bench import devprocs
from scheduling.models import Message
from smsgw.models import Tenant, api_key_create

BENCH_TENANT = "bench"
SWEEP_LOG = re.compile(
    r"sweep expired=\d+ queued=\{([^}]*)\} republished=\d+ leases_expired=\d+ in ([\d.]+) ms"
)


def sender_number(i: int) -> str:
    """The i-th From number ``messages_load(senders=...)`` uses."""
    return f"+1415556{i:04d}"


def _say(msg: str) -> None:
    print(msg, flush=True)


# A bench tenant is unlimited (0): the benchmarks measure the gateway, not a new tenant's quotas.
UNLIMITED = {"daily_message_quota": 0, "max_pending_scheduled": 0, "send_rate_per_second": 0}


def bench_reset() -> Tenant:
    """Empty the message tables (the bench database only), drop the pacing state an earlier scenario
    configured (sender and account rates, rate buckets, circuits), and return the bench tenant. Left in
    place, that state paced the next scenario: after `bench paced --senders 10` (an account rate of
    200/s) a 200/s `bench soak` fell 2 s further behind every minute."""
    from delivery.models import AccountCapacity, ProviderCircuit, RateBucket, SenderCapacity

    with connection.cursor() as cur:
        cur.execute("TRUNCATE scheduling_messageevent, delivery_attempt, scheduling_message CASCADE")
    for model in (SenderCapacity, AccountCapacity, RateBucket, ProviderCircuit):
        model.objects.all().delete()
    tenant, _ = Tenant.objects.get_or_create(
        # No API rate limit or quota: the benchmarks measure the gateway, not the limiter.
        slug=BENCH_TENANT,
        defaults={
            "name": "Benchmark",
            "default_from": "+14155550100",
            "api_rate_per_second": 0,
            **UNLIMITED,
        },
    )
    return tenant


def messages_load(
    tenant: Tenant,
    n: int,
    *,
    first_due,
    spread_seconds: float = 0.0,
    offset: int = 0,
    priority: str = "transactional",
    senders: int = 0,
) -> None:
    """Insert n accepted messages in one statement (as the API would store them, minus the per-request
    work). ``spread_seconds`` > 0 spreads due times evenly over that window; ``senders`` > 0 spreads
    them round-robin over that many From numbers (``sender_number(i)``) instead of the tenant's one."""
    step = spread_seconds / n if spread_seconds else 0.0
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO scheduling_message (public_id, tenant_id, "to", from_number, messaging_service_sid,
                body, encoding, segments, priority, metadata, requested_send_at, requested_timezone,
                dst_policy, dst_adjustment, due_at, expires_at, status, status_reason, version, run_after,
                attempt_count, provider, provider_status, error_code, created_at, updated_at,
                request_fingerprint, route_plan)
            SELECT 'msg_' || substr(md5(random()::text || g::text), 1, 24), %s,
                   '+1415' || lpad((2000000 + g)::text, 7, '0'),
                   CASE WHEN %s > 0 THEN '+1415556' || lpad((g %% GREATEST(%s, 1))::text, 4, '0')
                        ELSE %s END, '',
                   'Benchmark message ' || g, 'GSM-7', 1, %s, '{}', '', '', 'earlier', 'none',
                   %s + make_interval(secs => (g - %s) * %s), %s + interval '2 days', 'scheduled', '', 1,
                   %s + make_interval(secs => (g - %s) * %s), 0, %s, '', '', now(), now(), '', '[]'
            FROM generate_series(%s, %s) AS g
            """,
            [
                tenant.pk,
                senders,
                senders,
                tenant.default_from or "+14155550100",
                priority,
                first_due,
                offset,
                step,
                first_due,
                first_due,
                offset,
                step,
                settings.SMSGW_PROVIDER,
                offset,
                offset + n - 1,
            ],
        )


@dataclass
class MemorySampler:
    """Peak RSS per process over the worker process trees, sampled in a background thread."""

    pids: list[int]
    interval: float = 0.25
    peak_process_mb: float = 0.0
    peak_total_mb: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self):
        self._cpu_start = _cpu_by_kind(self.pids)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time each kind of process used while the sampler ran (workers, postgres, redis, ...)."""
        return {k: round(v - self._cpu_start.get(k, 0.0), 2) for k, v in _cpu_by_kind(self.pids).items()}

    def _run(self):
        while not self._stop.is_set():
            total = 0.0
            for pid in self.pids:
                try:
                    root = psutil.Process(pid)
                    for proc in [root, *root.children(recursive=True)]:
                        rss = proc.memory_info().rss / 2**20
                        total += rss
                        self.peak_process_mb = max(self.peak_process_mb, rss)
                except psutil.Error:
                    continue
            self.peak_total_mb = max(self.peak_total_mb, total)
            self._stop.wait(self.interval)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _cpu_by_kind(worker_pids: list[int]) -> dict[str, float]:
    """Cumulative CPU seconds by process kind, children included. Kinds: each worker tree by its
    celery node name, plus postgres, redis, rabbitmq and the sandbox found by name."""
    out: dict[str, float] = {}
    seen = set()
    for pid in worker_pids:
        try:
            root = psutil.Process(pid)
            name = next((a.split("@")[0] for a in root.cmdline() if "@" in a), str(pid))
            # What the root's children that already ended used (a pool child replaced after its memory
            # limit or task count takes its CPU time with it otherwise).
            ended = root.cpu_times()
            total = ended.children_user + ended.children_system
            for proc in [root, *root.children(recursive=True)]:
                t = proc.cpu_times()
                total += t.user + t.system
                seen.add(proc.pid)
            out[name] = total
        except psutil.Error:
            continue
    for proc in psutil.process_iter(["name", "cmdline", "cpu_times"]):
        if proc.pid in seen or proc.info["cpu_times"] is None:
            continue
        cmd = " ".join(proc.info["cmdline"] or [])
        kind = (
            "postgres"
            if proc.info["name"].startswith("postgres")
            else "redis"
            if "redis-server" in cmd
            else "rabbitmq"
            if "beam" in proc.info["name"]
            else "sandbox"
            if "-m sandbox" in cmd
            else "beat"
            if " beat " in cmd
            else "web"
            if "gunicorn" in cmd
            else None
        )
        if kind:
            out[kind] = out.get(kind, 0.0) + proc.info["cpu_times"].user + proc.info["cpu_times"].system
    return out


UNLIMITED_RATE_ENV = (
    "SMSGW_RATE_LONG_CODE",
    "SMSGW_RATE_TOLL_FREE",
    "SMSGW_RATE_SHORT_CODE",
    "SMSGW_RATE_ALPHANUMERIC",
    "SMSGW_RATE_MESSAGING_SERVICE",
    "SMSGW_ACCOUNT_RATE",
)


class Topology:
    """sandbox + beat + one sweep worker + send workers, as separate processes."""

    def __init__(
        self,
        *,
        latency_ms: int,
        send_concurrency: int,
        send_workers: int = 1,
        pool: str = "prefork",
        env: dict[str, str] | None = None,
        sandbox_args: list[str] | None = None,
        control_port: int | None = None,
        sandbox_realtime: bool = False,
    ):
        from sandbox.process import SandboxProcess

        # The sandbox stands for the provider, which runs on its own machines: here it shares two cores
        # with everything measured, so it runs at a higher priority where that is allowed (root), or
        # its own scheduling delays would show up as our bursts in the arrival times it records.
        # ``sandbox_realtime``: the real-time FIFO class instead (chrt), so its event loop runs the moment
        # a request arrives, whatever else is runnable (the kernel still keeps 5% of each second for the
        # other processes).
        prefix = []
        if os.geteuid() == 0:
            prefix = ["chrt", "--fifo", "1"] if sandbox_realtime else ["nice", "-n", "-10"]
        self.sandbox = SandboxProcess(
            extra_args=["--latency-ms", str(latency_ms), *(sandbox_args or [])],
            control_port=control_port,
            command_prefix=prefix,
        ).start()
        self.env = dict(os.environ)
        self.env.update(
            TWILIO_API_BASE_URL=self.sandbox.base_url,
            TWILIO_ACCOUNT_SID=self.sandbox.account_sid,
            TWILIO_AUTH_TOKEN=self.sandbox.auth_token,
            PYTHONUNBUFFERED="1",
            SMSGW_LOG_LEVEL="INFO",
            # Scenarios that are not about pacing run with limits above what the machine can do.
            **dict.fromkeys(UNLIMITED_RATE_ENV, "1000000"),
        )
        # Requests in flight per send process as in every recorded figure (docs/benchmarks.md), not the
        # share of a real account's concurrent-request limit the default now takes (smsgw.config.concurrency):
        # the sandbox sets no such limit unless a scenario gives it one. A scenario's env may set it.
        self.env.setdefault("SMSGW_SEND_CONCURRENCY", "250")
        self.env.update(env or {})
        self.procs: list[devprocs.Proc] = []
        self.sweeper = devprocs.celery_worker("sweeper", self.env, queues="sweep", concurrency=1)
        self.procs.append(self.sweeper)
        self.senders = [
            devprocs.celery_worker(
                f"sender{i}", self.env, queues=devprocs.SEND_QUEUES, concurrency=send_concurrency, pool=pool
            )
            for i in range(send_workers)
        ]
        self.procs += self.senders
        self.beat = devprocs.celery_beat("beat", self.env)
        self.procs.append(self.beat)

    def worker_pids(self) -> list[int]:
        return [p.pid for p in [self.sweeper, *self.senders]]

    def sweep_passes(self) -> list[tuple[int, float]]:
        out = []
        for line in SWEEP_LOG.findall(self.sweeper.log()):
            claimed = sum(int(v) for v in re.findall(r": (\d+)", line[0]))
            out.append((claimed, float(line[1])))
        return out

    def stop(self):
        for p in self.procs:
            p.stop()
        self.sandbox.stop()


def _percentiles(where: str, params: list) -> dict:
    with connection.cursor() as cur:
        cur.execute(
            f"""SELECT count(*),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM sent_at - due_at)),
                   percentile_cont(0.9) WITHIN GROUP (ORDER BY extract(epoch FROM sent_at - due_at)),
                   percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM sent_at - due_at)),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM sent_at - due_at)),
                   max(extract(epoch FROM sent_at - due_at)),
                   count(*) FILTER (WHERE sent_at < due_at),
                   min(sent_at), max(sent_at), min(due_at)
               FROM scheduling_message WHERE status = 'sent' AND {where}""",
            params,
        )
        n, p50, p90, p95, p99, mx, early, first_sent, last_sent, first_due = cur.fetchone()
    return {
        "sent": n,
        "lag_p50_s": p50,
        "lag_p90_s": p90,
        "lag_p95_s": p95,
        "lag_p99_s": p99,
        "lag_max_s": mx,
        "sent_early": early,
        "first_sent": first_sent,
        "last_sent": last_sent,
        "first_due": first_due,
    }


def _wait_sent(n: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    sent = 0
    while time.monotonic() < deadline:
        sent = Message.objects.filter(status="sent").count()
        if sent >= n:
            break
        time.sleep(0.5)
    return sent


def _sweep_summary(passes: list[tuple[int, float]]) -> dict:
    busy = [(n, ms) for n, ms in passes if n]
    if not busy:
        return {"passes": 0}
    return {
        "passes_with_work": len(busy),
        "claimed_per_pass_max": max(n for n, _ in busy),
        "claimed_per_pass_mean": round(sum(n for n, _ in busy) / len(busy), 1),
        "pass_ms_p50": statistics.median(ms for _, ms in busy),
        "pass_ms_max": max(ms for _, ms in busy),
        "ms_per_1000_claimed": 1000 * sum(ms for _, ms in busy) / max(1, sum(n for n, _ in busy)),
    }


def burst(
    *, n: int, latency_ms: int, concurrency: int, lead_seconds: float, timeout: float, baseline: bool = True
) -> dict:
    """n messages due at one moment; then, unless ``baseline`` is off, the same number of Celery ETA
    no-op tasks due at once on the same broker (bench.baseline), and the ratio of the two rates."""
    pool = "prefork"
    tenant = bench_reset()
    topo = Topology(latency_ms=latency_ms, send_concurrency=concurrency, pool=pool)
    try:
        due = timezone.now() + timedelta(seconds=lead_seconds)
        messages_load(tenant, n, first_due=due)
        with connection.cursor() as cur:
            cur.execute("ANALYZE scheduling_message")
        _say(f"burst: {n} messages due at {due.isoformat()} (sandbox latency {latency_ms} ms)")
        with MemorySampler(topo.worker_pids()) as mem:
            sent = _wait_sent(n, timeout)
            cpu = mem.cpu_seconds()
        stats = _percentiles("tenant_id = %s", [tenant.pk])
        span = (stats["last_sent"] - due).total_seconds() if stats["last_sent"] else float("nan")
        send_cpu = sum(v for k, v in cpu.items() if k.startswith("sender"))
        result = {
            "scenario": "burst",
            "messages": n,
            "sandbox_latency_ms": latency_ms,
            "broker": _broker(),
            "all_sent": sent >= n,
            "due_to_last_sent_s": span,
            "throughput_msg_s": n / span if span else None,
            **{k: v for k, v in stats.items() if k.startswith(("lag", "sent"))},
            "sandbox_submissions": topo.sandbox.stats()["submissions"],
            "sweep": _sweep_summary(topo.sweep_passes()),
            "worker_peak_rss_mb_per_process": mem.peak_process_mb,
            "worker_peak_rss_mb_total": mem.peak_total_mb,
            "cpu_seconds": cpu,
            "send_worker_cpu_ms_per_message": round(1000 * send_cpu / max(1, stats["sent"]), 3),
        }
    finally:
        topo.stop()
    if baseline:
        from bench.baseline import eta_noop

        base = eta_noop(
            n=n, concurrency=concurrency, pool=pool, lead_seconds=lead_seconds, timeout=timeout, env=topo.env
        )
        result["baseline_celery_eta_noop"] = base
        rate, base_rate = result["throughput_msg_s"], base["throughput_tasks_s"]
        # Target (docs/benchmarks.md): >= 1.5, the gateway drains a burst faster than bare ETA tasks run.
        result["ratio_gateway_to_baseline"] = round(rate / base_rate, 3) if rate and base_rate else None
    return result


def steady(*, rate: int, seconds: int, latency_ms: int, concurrency: int, timeout: float) -> dict:
    tenant = bench_reset()
    topo = Topology(latency_ms=latency_ms, send_concurrency=concurrency)
    try:
        n = rate * seconds
        due = timezone.now() + timedelta(seconds=5)
        messages_load(tenant, n, first_due=due, spread_seconds=seconds)
        _say(f"steady: {rate}/s for {seconds}s ({n} messages) from {due.isoformat()}")
        with MemorySampler(topo.worker_pids()) as mem:
            sent = _wait_sent(n, seconds + timeout)
        stats = _percentiles("tenant_id = %s", [tenant.pk])
        return {
            "scenario": "steady",
            "rate_per_s": rate,
            "seconds": seconds,
            "broker": _broker(),
            "all_sent": sent >= n,
            **{k: v for k, v in stats.items() if k.startswith(("lag", "sent"))},
            "sweep": _sweep_summary(topo.sweep_passes()),
            "worker_peak_rss_mb_per_process": mem.peak_process_mb,
        }
    finally:
        topo.stop()


def pending(*, n: int, repeats: int, idle_seconds: int) -> dict:
    from scheduling.dispatch.sweep import sweep_once

    tenant = bench_reset()
    chunk = 250_000
    tomorrow = timezone.now() + timedelta(days=1)
    for start in range(0, n, chunk):
        messages_load(tenant, min(chunk, n - start), first_due=tomorrow, offset=start)
    with connection.cursor() as cur:
        cur.execute("ANALYZE scheduling_message")
    _say(f"pending: {n} messages scheduled for {tomorrow.isoformat()}")
    sweep_once()  # warm caches and connection
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        report = sweep_once()
        times.append((time.perf_counter() - started) * 1000)
        assert report.total == 0
    topo = Topology(latency_ms=0, send_concurrency=2)
    try:
        with MemorySampler(topo.worker_pids()) as mem:
            time.sleep(idle_seconds)
    finally:
        topo.stop()
    times.sort()
    return {
        "scenario": "pending",
        "pending": n,
        "empty_sweep_ms_p50": statistics.median(times),
        "empty_sweep_ms_p99": times[int(len(times) * 0.99) - 1],
        "empty_sweep_ms_max": times[-1],
        "worker_peak_rss_mb_per_process": mem.peak_process_mb,
        "worker_peak_rss_mb_total": mem.peak_total_mb,
        "idle_seconds": idle_seconds,
    }


# wrk's Lua script for ``ingest`` and ``facade``: in "post" mode every request gets its own JSON body
# (recipient and text vary) and the API key as a Bearer header; in "form" mode (bench/facade.py) its own
# form body as Twilio's SDKs send it (``To``, ``From``, ``Body``) with HTTP Basic credentials (the first
# argument, already base64) and the From number (the third). Each wrk thread numbers its requests from
# its own offset so bodies never repeat. In "get" mode it sends plain GETs of the URL (``/healthz``, the
# web stack's own ceiling). In "batch" mode every request is a POST /v1/messages/batch of the fourth
# argument's count of distinct messages. The status codes seen are counted per thread and collected in done().
_WRK_SCRIPT = r"""
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


def _ingest_wrk(
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
        script.write(_WRK_SCRIPT)
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


def _ingest_python(
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


def _ingest_warmup(port: int, key: str, workers: int, threads: int) -> int:
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


def ingest(
    *, seconds: int, concurrency: int, web_workers: int, threads: int, healthz: bool = True, batch: int = 0
) -> dict:
    """POST /v1/messages through gunicorn, then (``batch`` > 0) POST /v1/messages/batch of ``batch``
    messages a request, then (unless ``healthz`` is off) GET /healthz against the same gunicorn process
    with the same client and settings: the ratios say how much of the web stack's ceiling the API's own
    work leaves, and how many more messages a second a batch takes in. The load comes from ``wrk`` when
    it is on PATH (a C client that leaves the cores to the server), else from the Python client;
    SMSGW_BENCH_CLIENT=python forces the latter. The result names the client used."""
    import shutil

    tenant = bench_reset()
    _, key = api_key_create(tenant=tenant, name="bench")
    port = devprocs.free_port()
    env = dict(os.environ)
    web = devprocs.gunicorn(env, port=port, workers=web_workers, threads=threads)
    url = f"http://127.0.0.1:{port}/v1/messages"
    worker_class = web.worker_class
    wrk = None if os.environ.get("SMSGW_BENCH_CLIENT") == "python" else shutil.which("wrk")
    try:
        warmup = _ingest_warmup(port, key, web_workers, threads)
        client = (
            partial(_ingest_wrk, wrk, seconds=seconds, concurrency=concurrency)
            if wrk
            else partial(_ingest_python, seconds=seconds, concurrency=concurrency)
        )
        run = _with_cpu(web.pid, lambda: client(url, key))
        stored = Message.objects.filter(tenant=tenant).count() - warmup
        batched = (
            _with_cpu(web.pid, lambda: client(f"{url}/batch", key, method="BATCH", items=batch))
            if batch
            else None
        )
        health = (
            _with_cpu(web.pid, lambda: client(f"http://127.0.0.1:{port}/healthz", key, method="GET"))
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


def _with_cpu(web_pid: int, load) -> dict:
    """``load()``'s result with the CPU the web (the gunicorn tree) and PostgreSQL spent a request
    while it ran: rates move with whatever else the two cores do, the cost of a request much less."""
    from bench.soak import CpuByRole  # bench.soak imports this module

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


def _broker() -> str:
    return settings.CELERY_BROKER_URL.split("://", 1)[0]
