"""Figures read back after a run: send lag from the message table, receipt lag from the receipt table,
the sweep's passes from its log, and the line printed as a run goes."""

from __future__ import annotations

import statistics
import time

from django.db import connection

from scheduling.models import Message


def say(msg: str) -> None:
    print(msg, flush=True)


def percentiles(where: str, params: list) -> dict:
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


def wait_sent(n: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    sent = 0
    while time.monotonic() < deadline:
        sent = Message.objects.filter(status="sent").count()
        if sent >= n:
            break
        time.sleep(0.5)
    return sent


def sweep_summary(passes: list[tuple[int, float]]) -> dict:
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


def receipt_lag() -> dict:
    with connection.cursor() as cur:
        cur.execute(
            """WITH r AS (SELECT received_at, processed_at,
                                extract(epoch FROM processed_at - received_at) AS lag
                         FROM receipts_receiptevent WHERE processed_at IS NOT NULL)
               SELECT count(*), min(received_at), max(processed_at),
                      percentile_cont(0.5) WITHIN GROUP (ORDER BY lag),
                      percentile_cont(0.99) WITHIN GROUP (ORDER BY lag), max(lag)
               FROM r"""
        )
        n, first, last, p50, p99, mx = cur.fetchone()
    span = (last - first).total_seconds() if n else 0.0
    return {
        "processed": n,
        "processed_per_s": n / span if span else None,
        "receipt_lag_p50_s": p50,
        "receipt_lag_p99_s": p99,
        "receipt_lag_max_s": mx,
    }
