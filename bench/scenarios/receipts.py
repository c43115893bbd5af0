"""Benchmarks for the return path (run through ``python -m bench receipts``): signed callbacks accepted
per second at the endpoint through gunicorn, processed per second by the `receipts` worker, and the
receipt lag (processed minus received). Prints figures; asserts nothing."""

from __future__ import annotations

import asyncio
import os
import time
from urllib.parse import urlencode

from django.db import connection

from bench.harness import data, devprocs, figures, topology
from bench.harness.sampling import CpuByRole
from delivery.providers.twilio.sandbox.callbacks import twilio_signature
from receipts.models import ReceiptEvent

AUTH_TOKEN = "bench-auth-token"
ACCOUNT_SID = "AC" + "0" * 32


def sent_messages_load(tenant, n: int, *, offset: int = 0) -> list[str]:
    """n messages already `sent` with provider ids, as if submitted earlier; returns the sids."""
    from django.utils import timezone

    data.messages_load(tenant, n, first_due=timezone.now(), offset=offset)
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE scheduling_message SET status = 'sent', provider = 'twilio', sent_at = now(), "
            "run_after = NULL, provider_message_id = 'SM' || lpad(to_hex(id), 32, '0') "
            "WHERE tenant_id = %s AND status = 'scheduled' RETURNING provider_message_id",
            [tenant.pk],
        )
        return [r[0] for r in cur.fetchall()]


def signed_bodies(url: str, sids: list[str], status: str = "delivered") -> list[tuple[bytes, str]]:
    out = []
    for sid in sids:
        params = {
            "MessageSid": sid,
            "SmsSid": sid,
            "MessageStatus": status,
            "SmsStatus": status,
            "AccountSid": ACCOUNT_SID,
            "From": "+14155550100",
            "To": "+14155550123",
            "ApiVersion": "2010-04-01",
        }
        out.append((urlencode(params).encode(), twilio_signature(AUTH_TOKEN, url, params)))
    return out


async def post_all(url: str, bodies: list[tuple[bytes, str]], *, concurrency: int, rate: float | None):
    """POST every body once; at most ``rate`` per second when given. Returns (status counts, seconds)."""
    import aiohttp

    codes: dict[int, int] = {}
    queue = iter(bodies)
    started = time.perf_counter()
    interval = 1.0 / rate if rate else 0.0

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:

        async def client(k: int):
            i = 0
            for body, sig in queue:
                if interval:
                    # open-loop pacing: request number i of this client is due at started + (i*c + k)*interval
                    due = started + (i * concurrency + k) * interval
                    delay = due - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    i += 1
                async with session.post(
                    url,
                    data=body,
                    headers={"X-Twilio-Signature": sig, "Content-Type": "application/x-www-form-urlencoded"},
                ) as resp:
                    await resp.read()
                    codes[resp.status] = codes.get(resp.status, 0) + 1

        await asyncio.gather(*(client(k) for k in range(concurrency)))
    return codes, time.perf_counter() - started


class ReceiptTopology:
    """gunicorn (the receipt endpoint) + one `receipts` worker + beat."""

    def __init__(self, *, web_workers: int):
        port = devprocs.free_port()
        self.url = f"http://127.0.0.1:{port}/receipts/twilio/"
        self.env = dict(os.environ)
        self.env.update(
            SMSGW_PUBLIC_BASE_URL=f"http://127.0.0.1:{port}",
            TWILIO_AUTH_TOKEN=AUTH_TOKEN,
            TWILIO_ACCOUNT_SID=ACCOUNT_SID,
            PYTHONUNBUFFERED="1",
        )
        self.web = devprocs.gunicorn(self.env, port=port, workers=web_workers)
        self.worker = devprocs.celery_worker("receipts", self.env, queues="receipts", concurrency=1)
        self.beat = devprocs.celery_beat("rbeat", self.env)

    def stop(self):
        for p in (self.web, self.worker, self.beat):
            p.stop()


def receipts(*, n: int, concurrency: int, rate: float | None, web_workers: int, timeout: float) -> dict:
    tenant = data.bench_reset()
    with connection.cursor() as cur:
        cur.execute("TRUNCATE receipts_receiptevent, receipts_webhookdelivery")
    sids = sent_messages_load(tenant, n)
    topo = ReceiptTopology(web_workers=web_workers)
    try:
        bodies = signed_bodies(topo.url, sids)
        cpu = CpuByRole({"web": [topo.web.pid], "receipts": [topo.worker.pid], "beat": [topo.beat.pid]})
        cpu.start()
        codes, seconds = asyncio.run(post_all(topo.url, bodies, concurrency=concurrency, rate=rate))
        used = cpu.stop()
        accepted = sum(v for k, v in codes.items() if 200 <= k < 300)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and ReceiptEvent.objects.filter(processed_at__isnull=True).exists():
            time.sleep(0.5)
        with connection.cursor() as cur:
            cur.execute(
                "SELECT status, count(*) FROM scheduling_message WHERE tenant_id = %s GROUP BY status",
                [tenant.pk],
            )
            statuses = dict(cur.fetchall())
        return {
            "scenario": "receipts",
            "callbacks": n,
            "target_rate_per_s": rate,
            "client_concurrency": concurrency,
            "web_workers": web_workers,
            "status_codes": codes,
            "accepted_per_s": accepted / seconds,
            "post_seconds": round(seconds, 2),
            # The endpoint's own cost: CPU of the gunicorn tree while the callbacks were POSTed, per callback.
            "web_cpu_ms_per_callback": round(used["cpu_seconds_by_role"]["web"] * 1000 / n, 3),
            "cpu_while_posting": used,
            **figures.receipt_lag(),
            "message_statuses": statuses,
        }
    finally:
        topo.stop()


def burst_under_receipts(
    *, n: int, receipt_burst: int, latency_ms: int, concurrency: int, web_workers: int, timeout: float
) -> dict:
    """The send burst (bench.scenarios.throughput.burst's topology) while `receipt_burst` signed callbacks
    hit the receipt endpoint and the receipts worker at the same time. Compare with a plain `bench burst`."""
    import threading
    from datetime import timedelta

    from django.utils import timezone

    from smsgw.models import Tenant

    tenant = data.bench_reset()
    with connection.cursor() as cur:
        cur.execute("TRUNCATE receipts_receiptevent, receipts_webhookdelivery")
    other, _ = Tenant.objects.get_or_create(
        slug="bench-receipts",
        defaults={"name": "Bench receipts", "default_from": "+14155550100", **data.UNLIMITED},
    )
    sids = sent_messages_load(other, receipt_burst, offset=n + 1)
    receipts_topo = ReceiptTopology(web_workers=web_workers)
    topo = topology.Topology(latency_ms=latency_ms, send_concurrency=concurrency)
    try:
        bodies = signed_bodies(receipts_topo.url, sids)
        due = timezone.now() + timedelta(seconds=15)
        data.messages_load(tenant, n, first_due=due)
        post_result: dict = {}

        def fire():
            wait = (due - timezone.now()).total_seconds()
            if wait > 0:
                time.sleep(wait)
            post_result["codes"], post_result["seconds"] = asyncio.run(
                post_all(receipts_topo.url, bodies, concurrency=64, rate=None)
            )

        poster = threading.Thread(target=fire)
        poster.start()
        sent = figures.wait_sent(n, timeout)
        poster.join()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and ReceiptEvent.objects.filter(processed_at__isnull=True).exists():
            time.sleep(0.5)
        stats = figures.percentiles("tenant_id = %s", [tenant.pk])
        span = (stats["last_sent"] - due).total_seconds() if stats["last_sent"] else float("nan")
        accepted = sum(v for k, v in post_result.get("codes", {}).items() if 200 <= k < 300)
        return {
            "scenario": "burst_under_receipts",
            "messages": n,
            "receipt_burst": receipt_burst,
            "broker": topology.broker(),
            "all_sent": sent >= n,
            "send_throughput_msg_s": n / span,
            "send_lag_p99_s": stats["lag_p99_s"],
            "sent_early": stats["sent_early"],
            "receipts_accepted_per_s": accepted / post_result["seconds"] if post_result else None,
            "receipt_status_codes": post_result.get("codes"),
            **figures.receipt_lag(),
        }
    finally:
        topo.stop()
        receipts_topo.stop()
