"""Benchmark scenario for campaigns (docs/campaigns.md, "Benchmark"), run through
``python -m bench campaign``: a CSV of N recipients with two template variables is generated on disk,
POSTed to a real gunicorn as a streamed multipart upload, and made into messages by a real celery worker
on the ``campaigns`` queue. Prints recipients/s from the start of the POST to the last message made, peak
RSS of the web and the worker processes (sampled), and duplicates ((campaign, to) groups with more than
one message). Asserts nothing; needs PostgreSQL (it empties the message and campaign tables)."""

from __future__ import annotations

import http.client
import json
import os
import secrets
import tempfile
import time
from pathlib import Path

from django.db import connection

from bench.harness import devprocs
from bench.harness.data import bench_reset
from bench.harness.sampling import MemorySampler
from scheduling.models import Campaign, CampaignRange, Message
from smsgw.models import api_key_create

BOUNDARY = "smsgw-bench-" + secrets.token_hex(8)


def _say(msg: str) -> None:
    print(msg, flush=True)


def csv_write(path: Path, n: int) -> int:
    """to,first_name,code: n distinct valid numbers (+1 415 2xx xxxx, San Francisco)."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("to,first_name,code\n")
        step = 50_000
        for start in range(0, n, step):
            f.write(
                "".join(
                    f"+1415{2000000 + i:07d},Name{i % 997},{100000 + i}\n"
                    for i in range(start, min(n, start + step))
                )
            )
    return path.stat().st_size


def _part(name: str, value: str) -> bytes:
    return f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()


def upload(port: int, key: str, path: Path, fields: dict[str, str]) -> tuple[int, dict]:
    """POST the file as multipart/form-data, streamed from disk in 1 MiB pieces (never all in memory)."""
    head = b"".join(_part(k, v) for k, v in fields.items())
    head += (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="recipients"; filename="list.csv"\r\n'
        "Content-Type: text/csv\r\n\r\n"
    ).encode()
    tail = f"\r\n--{BOUNDARY}--\r\n".encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.putrequest("POST", "/v1/campaigns")
    conn.putheader("Authorization", f"Bearer {key}")
    conn.putheader("Content-Type", f"multipart/form-data; boundary={BOUNDARY}")
    conn.putheader("Content-Length", str(len(head) + path.stat().st_size + len(tail)))
    conn.endheaders()
    conn.send(head)
    with open(path, "rb") as f:
        while piece := f.read(1 << 20):
            conn.send(piece)
    conn.send(tail)
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, json.loads(body or b"{}")


def _reset():
    tenant = bench_reset()
    with connection.cursor() as cur:
        cur.execute(
            "TRUNCATE scheduling_campaigncounter, scheduling_campaignerror, scheduling_campaignupload, "
            "scheduling_campaign CASCADE"
        )
    return tenant


def campaign(
    *,
    recipients: int,
    web_workers: int,
    timeout: float,
    keep_file: bool = False,
    processes: int = 2,
    ranges: int | None = None,
    single_first: bool = False,
) -> dict:
    """The list made by a worker with ``processes`` pool processes, in ``ranges`` line ranges (default: the
    setting). ``single_first``: the same list first made by one process in one range (the creation job
    before ranges), in the same run, and the ratio printed."""
    path = Path(tempfile.mkdtemp(prefix="smsgw-bench-campaign-")) / "recipients.csv"
    size = csv_write(path, recipients)
    _say(f"campaign: {recipients} rows, {size / 2**20:.1f} MiB at {path}")
    try:
        single = None
        if single_first:
            single = _campaign_once(path, size, recipients, web_workers, timeout, processes=1, ranges=1)
        result = _campaign_once(
            path, size, recipients, web_workers, timeout, processes=processes, ranges=ranges
        )
    finally:
        if not keep_file:
            path.unlink(missing_ok=True)
    if single is not None:
        result["single_process_one_range"] = single
        result["ratio_to_single"] = round(result["recipients_per_s"] / single["recipients_per_s"], 3)
    return result


def _campaign_once(
    path: Path,
    size: int,
    recipients: int,
    web_workers: int,
    timeout: float,
    *,
    processes: int,
    ranges: int | None,
) -> dict:
    tenant = _reset()
    _, key = api_key_create(tenant=tenant, name="bench")
    env = dict(os.environ, PYTHONUNBUFFERED="1", SMSGW_LOG_LEVEL="INFO")
    if ranges is not None:
        env["SMSGW_CAMPAIGN_MAKE_RANGES"] = str(ranges)
    port = devprocs.free_port()
    web = devprocs.gunicorn(env, port=port, workers=web_workers)
    worker = devprocs.celery_worker("campaigns", env, queues="campaigns", concurrency=processes)
    tomorrow = time.strftime("%Y-%m-%dT09:00:00Z", time.gmtime(time.time() + 86400))
    fields = {"name": "bench", "template": "Hello {first_name}, your code is {code}", "send_at": tomorrow}
    try:
        with MemorySampler([web.pid]) as web_mem, MemorySampler([worker.pid]) as worker_mem:
            started = time.perf_counter()
            status, body = upload(port, key, path, fields)
            accepted = time.perf_counter() - started
            if status != 202:
                raise RuntimeError(f"POST /v1/campaigns answered {status}: {body}")
            _say(
                f"campaign: accepted in {accepted:.2f} s ({body['id']}); "
                f"making messages ({processes} processes)"
            )
            deadline = time.monotonic() + timeout
            row = None
            while time.monotonic() < deadline:
                row = Campaign.objects.filter(public_id=body["id"]).values().first()
                if row["made_at"] is not None or row["status"] != "creating":
                    break
                time.sleep(0.2)  # polling for the end of the job; its timing resolution
            elapsed = time.perf_counter() - started
            cpu = worker_mem.cpu_seconds()
    finally:
        worker.stop()
        web.stop()
    made = Message.objects.filter(campaign_id=row["id"]).count()
    with connection.cursor() as cur:
        cur.execute(
            'SELECT count(*) FROM (SELECT 1 FROM scheduling_message WHERE campaign_id = %s GROUP BY "to" '
            "HAVING count(*) > 1) AS d",
            [row["id"]],
        )
        duplicates = cur.fetchone()[0]
    made_ranges = list(
        CampaignRange.objects.filter(campaign_id=row["id"]).order_by("index").values_list("first", "done")
    )
    return {
        "scenario": "campaign",
        "recipients": recipients,
        "csv_mib": round(size / 2**20, 1),
        "processes": processes,
        "ranges": len(made_ranges),
        "ranges_done": sum(1 for _, done in made_ranges if done),
        "status": row["status"],
        "messages_made": made,
        "rows_rejected": row["rows_rejected"],
        "duplicates": duplicates,
        "seconds_accept": round(accepted, 2),
        "seconds_total": round(elapsed, 2),
        "recipients_per_s": round(recipients / elapsed),
        "target_recipients_per_s": 20_000,
        "peak_rss_web_mb": round(web_mem.peak_process_mb, 1),
        "peak_rss_web_tree_mb": round(web_mem.peak_total_mb, 1),
        "peak_rss_worker_mb": round(worker_mem.peak_process_mb, 1),
        "peak_rss_worker_tree_mb": round(worker_mem.peak_total_mb, 1),
        "target_peak_rss_mb": 250,
        "cpu_seconds": cpu,
    }
