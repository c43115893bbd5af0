"""``python -m bench inbound``: replies from recipients at a steady rate through the web process, with a
share repeated as a provider's retries, to the tenant's webhook and to the pull API
(docs/running-benchmarks.md, docs/inbound.md).

Real processes: gunicorn takes Twilio's signed "A message comes in" form at ``/inbound/twilio/``, a
`celery worker` on the inbound and webhooks queues and a `celery beat` process them, and a local HTTP
receiver is the tenant's webhook. Meanwhile a pull client polls ``GET /v1/inbound``. Printed: stored,
forwarded, duplicates forwarded (target 0), lost (target 0), and the delay from the provider's POST to the
tenant's webhook and to the API, p50 and p99 (target p99 <= 2 s)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import statistics
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bench.harness import data, devprocs
from inbound.models import InboundMessage
from smsgw.models import api_key_create
from smsgw.tenancy.senders import sender_assign

TOKEN = "bench-inbound-token"
CONTACTS = 5000


class _Receiver:
    """The tenant's webhook: the time each message.received arrived, by its body's tag."""

    def __init__(self) -> None:
        self.arrivals: dict[str, list[float]] = {}
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                at = time.time()
                self.send_response(204)
                self.end_headers()
                event = json.loads(body)
                if event.get("type") == "message.received":
                    with receiver.lock:
                        receiver.arrivals.setdefault(event["data"]["body"], []).append(at)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", devprocs.free_port()), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks"


def _form(tag: str, sid: str, contact: int) -> dict[str, str]:
    return {
        "MessageSid": sid,
        "SmsMessageSid": sid,
        "AccountSid": "AC" + "0" * 32,
        "From": f"+1415{2000000 + contact:07d}",
        "To": "+14155550100",
        "Body": tag,
        "NumMedia": "0",
        "NumSegments": "1",
        "SmsStatus": "received",
        "ApiVersion": "2010-04-01",
    }


async def _load(url: str, rate: int, seconds: int, retry_share: float) -> tuple[dict[str, float], dict]:
    """POST ``rate`` new replies a second for ``seconds``, and a ``retry_share`` of them again a little
    later (the same MessageSid). Returns each tag's first POST time and the answer counts."""
    import aiohttp
    from twilio.request_validator import RequestValidator

    validator = RequestValidator(TOKEN)
    sent: dict[str, float] = {}
    codes: dict[str, int] = {}
    retries: list[tuple[float, dict]] = []
    rng = random.Random(41)

    async def post(session, form):
        headers = {"X-Twilio-Signature": validator.compute_signature(url, form)}
        try:
            async with session.post(url, data=form, headers=headers) as resp:
                await resp.read()
                key = str(resp.status)
        except aiohttp.ClientError as exc:
            key = type(exc).__name__
        codes[key] = codes.get(key, 0) + 1

    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=connector) as session:
        tasks = []
        start = time.monotonic()
        for n in range(rate * seconds):
            due = start + n / rate
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            tag = f"bench-{n}"
            form = _form(tag, "SM" + secrets.token_hex(16), n % CONTACTS)
            sent[tag] = time.time()
            tasks.append(asyncio.create_task(post(session, form)))
            if rng.random() < retry_share:
                retries.append((time.monotonic() + rng.uniform(0.05, 2.0), form))
            while retries and retries[0][0] <= time.monotonic():
                tasks.append(asyncio.create_task(post(session, retries.pop(0)[1])))
        for _, form in retries:
            tasks.append(asyncio.create_task(post(session, form)))
        await asyncio.gather(*tasks)
    return sent, codes


def _pull(base: str, key: str, seen: dict[str, float], stop: threading.Event) -> None:
    """Poll GET /v1/inbound (newest first, overlapping windows) and note when each tag first showed."""
    since = "2000-01-01T00:00:00+00:00"
    while not stop.is_set():
        url = f"{base}/v1/inbound?" + urllib.parse.urlencode({"received_after": since, "page_size": 500})
        newest = since
        while url:
            request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})  # noqa: S310
            with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310 - http://127.0.0.1 only
                page = json.load(resp)
            at = time.time()
            for item in page["results"]:
                seen.setdefault(item["body"], at)
                newest = max(newest, item["received_at"])
            url = page["next"]
        since = newest
        stop.wait(0.1)


def _delays(sent: dict[str, float], arrived: dict[str, float]) -> dict:
    delays = sorted(arrived[t] - sent[t] for t in arrived if t in sent)
    if not delays:
        return {"p50_s": None, "p99_s": None, "max_s": None}
    return {
        "p50_s": round(statistics.median(delays), 3),
        "p99_s": round(delays[min(len(delays) - 1, int(len(delays) * 0.99))], 3),
        "max_s": round(delays[-1], 3),
    }


def inbound(*, rate: int, seconds: int, retry_share: float, web_workers: int, drain_timeout: float) -> dict:
    tenant = data.bench_reset()
    InboundMessage.objects.all().delete()
    sender_assign(tenant=tenant, sender="+14155550100", shared=False)
    receiver = _Receiver()
    tenant.webhook_url, tenant.webhook_secret = receiver.url, "whsec_" + secrets.token_hex(24)
    tenant.save(update_fields=["webhook_url", "webhook_secret"])
    _, key = api_key_create(tenant=tenant, name="bench", scopes=["inbound:read"])
    port = devprocs.free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "TWILIO_AUTH_TOKEN": TOKEN,
        "SMSGW_PUBLIC_BASE_URL": base,
        "SMSGW_WEBHOOK_ALLOW_PRIVATE": "1",
        "SMSGW_WEBHOOK_ALLOW_HTTP": "1",
    }
    procs = [
        devprocs.gunicorn(env, port=port, workers=web_workers, threads=4),
        devprocs.celery_worker("inbound", env, queues="inbound", concurrency=1),
        devprocs.celery_worker("webhooks", env, queues="webhooks", concurrency=1),
        devprocs.celery_beat("inbound", env),
    ]
    pulled: dict[str, float] = {}
    stop = threading.Event()
    puller = threading.Thread(target=_pull, args=(base, key, pulled, stop), daemon=True)
    try:
        puller.start()
        started = time.monotonic()
        sent, codes = asyncio.run(_load(f"{base}/inbound/twilio/", rate, seconds, retry_share))
        elapsed = time.monotonic() - started
        deadline = time.monotonic() + drain_timeout
        while time.monotonic() < deadline and (len(receiver.arrivals) < len(sent) or len(pulled) < len(sent)):
            time.sleep(0.2)
    finally:
        stop.set()
        devprocs.stop_all(procs)
        receiver.server.shutdown()
    stored = set(InboundMessage.objects.filter(body__startswith="bench-").values_list("body", flat=True))
    first_arrivals = {tag: times[0] for tag, times in receiver.arrivals.items()}
    return {
        "scenario": "inbound",
        "rate_asked": rate,
        "seconds": seconds,
        "posted_per_s": round(sum(codes.values()) / elapsed, 1),
        "answers": codes,
        "replies": len(sent),
        "retries_posted": sum(codes.values()) - len(sent),
        "stored": len(stored),
        "lost": len(set(sent) - stored),
        "forwarded": len(receiver.arrivals),
        "duplicates_forwarded": sum(len(t) - 1 for t in receiver.arrivals.values()),
        "webhook_delay": _delays(sent, first_arrivals),
        "pulled": len(pulled),
        "pull_delay": _delays(sent, pulled),
        "web_workers": web_workers,
    }
