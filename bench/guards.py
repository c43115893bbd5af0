"""What the suppression list and the destination guards cost at a paced burst (``manage.py bench guards``,
issue 12 §3: at most 5% of the burst's throughput with a 1,000,000-entry suppression list).

The paced scenario (bench.pacing.paced) twice in one run, the same messages and rates:

1. baseline: no suppression entries, guards off (SMSGW_GUARDS=0: no destination check, no velocity
   gate). The send worker's screening query still runs (the suppression list cannot be turned off), but
   against an empty table;
2. guarded: ``suppressions`` entries for the bench tenant (numbers outside the burst's range, so every
   message still goes: the cost of looking, not of stopping), guards on, both velocity rules on with
   limits high enough never to hold, and no known numbers (every recipient is new: the KnownNumber
   probe and insert for each one, the worst case).

Throughput is messages submitted per second of the drain (due time to last submission). The rates are
set above what the machine sends, so the drain is bound by the gateway's own work, not by the pacing;
CPU per message of each process kind is printed beside it (a second, less noisy view of the cost)."""

from __future__ import annotations

import time

from django.db import connection

from bench import core, pacing
from smsgw.models import Tenant

HIGH = 1_000_000_000  # velocity limits that never hold


def _tables_empty() -> None:
    with connection.cursor() as cur:
        cur.execute(
            "TRUNCATE delivery_suppression, delivery_suppressionchange, delivery_knownnumber, "
            "delivery_velocitycounter, delivery_reviewholdmessage, delivery_reviewhold"
        )


def _guards_off(tenant: Tenant) -> None:
    _tables_empty()
    Tenant.objects.filter(pk=tenant.pk).update(
        velocity_prefix_max=0, velocity_new_numbers_max=0, allowed_countries=[], country=""
    )


def _suppressions_load(tenant: Tenant, n: int) -> float:
    """n entries in one statement: +1 416 xxx xxxx (Toronto) never matches the burst's +1 415 2xx xxxx
    recipients, alternately for every sender and for the tenant's own From number."""
    started = time.monotonic()
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO delivery_suppression (tenant_id, number, sender, source, created_at)
            SELECT %s, '+1416' || lpad(g::text, 7, '0'),
                   CASE WHEN g %% 2 = 0 THEN '' ELSE %s END, 'api', now()
            FROM generate_series(1, %s) AS g
            """,
            [tenant.pk, tenant.default_from, n],
        )
    # Vacuumed and analyzed now, or autovacuum would start on the million new rows during the burst.
    with connection.cursor() as cur:
        cur.execute("VACUUM (ANALYZE) delivery_suppression")
    return time.monotonic() - started


def _guards_on(suppressions: int, loaded: dict):
    def setup(tenant: Tenant) -> None:
        _tables_empty()
        loaded["seconds"] = round(_suppressions_load(tenant, suppressions), 1)
        Tenant.objects.filter(pk=tenant.pk).update(
            velocity_prefix_max=HIGH, velocity_new_numbers_max=HIGH, allowed_countries=[], country=""
        )

    return setup


def _throughput(result: dict) -> float | None:
    drain = result.get("drain_seconds")
    if not drain or drain != drain:  # no submissions, or NaN
        return None
    return round(result["submitted"] / drain, 1)


def _summary(result: dict) -> dict:
    keys = ("submitted", "drain_seconds", "rejections", "cpu_ms_per_message", "late_batches", "sweep")
    return {"throughput_per_s": _throughput(result), **{k: result.get(k) for k in keys}}


def guards(
    *, n: int, senders: int, rate: float, suppressions: int, queue_seconds: float, timeout: float, rounds: int
) -> dict:
    """``rounds`` pairs, baseline then guarded each time: the machine is shared, and alternating keeps a
    slow minute from landing on one side only. The ratio is of the summed throughputs."""
    common = {"n": n, "senders": senders, "rate": rate, "queue_seconds": queue_seconds, "timeout": timeout}
    pairs = []
    loaded: dict = {}
    for i in range(rounds):
        core._say(f"guards round {i + 1}: baseline (guards off, no suppression entries), {n} messages")
        off = pacing.paced(**common, env={"SMSGW_GUARDS": "0"}, setup=_guards_off)
        core._say(f"guards round {i + 1}: guarded ({suppressions} suppression entries, every guard on)")
        on = pacing.paced(**common, env={"SMSGW_GUARDS": "1"}, setup=_guards_on(suppressions, loaded))
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM delivery_knownnumber")
            known = cur.fetchone()[0]
            cur.execute("SELECT count(*) FROM delivery_reviewhold")
            holds = cur.fetchone()[0]
        pairs.append((off, on, known, holds))
    _tables_empty()  # leave the bench database as the other scenarios expect it
    offs = [_throughput(off) for off, _, _, _ in pairs]
    ons = [_throughput(on) for _, on, _, _ in pairs]
    ratio = round(sum(ons) / sum(offs), 3) if all(offs) and all(ons) else None
    return {
        "scenario": "guards",
        "messages": n,
        "account_rate": senders * rate,
        "suppression_entries": suppressions,
        "suppressions_load_seconds": loaded.get("seconds"),
        "rounds": [
            {
                "baseline": _summary(off),
                "guarded": _summary(on),
                "guarded_known_numbers_recorded": known,
                "guarded_review_holds": holds,
                "ratio": round(_throughput(on) / _throughput(off), 3)
                if _throughput(off) and _throughput(on)
                else None,
            }
            for off, on, known, holds in pairs
        ],
        "baseline_throughput_per_s": offs,
        "guarded_throughput_per_s": ons,
        "throughput_ratio_guarded_over_baseline": ratio,
        "target": "ratio >= 0.95 (the checks cost at most 5% of the paced burst's throughput)",
        "meets_target": ratio is not None and ratio >= 0.95,
    }
