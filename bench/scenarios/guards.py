"""What the suppression list and the destination guards cost at a paced burst (``python -m bench guards``,
target at most 5% of the burst's throughput with a 1,000,000-entry suppression list).

The paced scenario (bench.scenarios.pacing.paced) twice in one run, the same messages and rates:

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

import statistics
import time
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from bench.harness import data, figures
from bench.scenarios import pacing
from delivery.guards import screening
from scheduling.dispatch import release
from scheduling.models import Message
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
    _settle()
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
    _settle()
    return time.monotonic() - started


def _settle() -> None:
    """Vacuumed, analyzed and checkpointed before the burst, on both sides: otherwise autovacuum and the
    checkpointer would be writing out a freshly loaded million rows during the guarded burst only."""
    with connection.cursor() as cur:
        cur.execute("VACUUM (ANALYZE) delivery_suppression")
        cur.execute("CHECKPOINT")


def _guards_on(suppressions: int, loaded: dict):
    def setup(tenant: Tenant) -> None:
        _tables_empty()
        loaded["seconds"] = round(_suppressions_load(tenant, suppressions), 1)
        Tenant.objects.filter(pk=tenant.pk).update(
            velocity_prefix_max=HIGH, velocity_new_numbers_max=HIGH, allowed_countries=[], country=""
        )

    return setup


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def checks_cost(tenant: Tenant, *, repeats: int = 7, batch: int = 1000, send_batch: int = 250) -> dict:
    """The two code paths the guards add to, timed in this process with the suppression list loaded,
    guards off and on alternately (less exposed to the shared machine than the end-to-end figure): one
    release pass over ``batch`` due messages (publishing stubbed out: no broker in the figure), and the
    send worker's screening of ``send_batch`` queued messages. Medians, and per message."""
    publish, release._publish = release._publish, lambda *a, **k: None
    passes: dict[str, list[float]] = {"off": [], "on": []}
    screens: dict[str, list[float]] = {"off": [], "on": []}
    try:
        offset = 0
        for _ in range(repeats):
            for side in ("off", "on"):
                settings.GUARDS_ENABLED = side == "on"
                limit = HIGH if side == "on" else 0
                Tenant.objects.filter(pk=tenant.pk).update(
                    velocity_prefix_max=limit, velocity_new_numbers_max=limit
                )
                with connection.cursor() as cur:
                    cur.execute(
                        "TRUNCATE scheduling_messageevent, delivery_attempt, scheduling_message CASCADE"
                    )
                due = timezone.now() - timedelta(seconds=1)
                data.messages_load(tenant, batch, first_due=due, senders=50, offset=offset)
                offset += batch  # new numbers each time: the known-number insert is paid every pass
                passes[side].append(_timed(lambda: release.due_release(limit=batch)))
                # A send batch as the worker gets it (the pass above may have paced most of them: queue
                # a batch's worth directly; this is the benchmark's own data, not a product path).
                ids = list(Message.objects.order_by("pk").values_list("pk", flat=True)[:send_batch])
                Message.objects.filter(pk__in=ids).update(status="queued")
                now = timezone.now()
                screens[side].append(_timed(lambda ids=ids, now=now: screening.batch_screen(ids, now=now)))
    finally:
        release._publish = publish
        settings.GUARDS_ENABLED = True

    def per_message(samples: dict[str, list[float]], n: int) -> dict:
        off, on = statistics.median(samples["off"]), statistics.median(samples["on"])
        return {
            "ms_off": round(off, 2),
            "ms_on": round(on, 2),
            "added_ms_per_message": round((on - off) / n, 4),
        }

    return {
        "release_pass_of_1000": per_message(passes, batch),
        f"screening_of_{send_batch}": per_message(screens, send_batch),
    }


def _throughput(result: dict) -> float | None:
    drain = result.get("drain_seconds")
    if not drain or drain != drain:  # no submissions, or NaN
        return None
    return round(result["submitted"] / drain, 1)


def _cpu_total(result: dict) -> float:
    """CPU per message of our processes and PostgreSQL (what the in-process figures compare with)."""
    cpu = result.get("cpu_ms_per_message") or {}
    return round(sum(v for k, v in cpu.items() if k in ("sweeper", "sender0", "postgres", "beat")), 3)


def _summary(result: dict) -> dict:
    keys = ("submitted", "drain_seconds", "rejections", "cpu_ms_per_message", "late_batches", "sweep")
    return {"throughput_per_s": _throughput(result), **{k: result.get(k) for k in keys}}


def guards(
    *, n: int, senders: int, rate: float, suppressions: int, queue_seconds: float, timeout: float, rounds: int
) -> dict:
    """``rounds`` pairs of baseline and guarded runs, in alternating order: the machine is shared, and
    alternating keeps a slow minute from landing on one side only. The ratio is of the summed
    throughputs."""
    common = {"n": n, "senders": senders, "rate": rate, "queue_seconds": queue_seconds, "timeout": timeout}
    pairs = []
    loaded: dict = {}
    for i in range(rounds):
        runs = {}
        # Every second round starts with the guarded side: whichever runs second does not always pay for
        # what the first left behind (dead rows, a warmer or colder cache).
        for side in ("off", "on") if i % 2 == 0 else ("on", "off"):
            if side == "off":
                figures.say(
                    f"guards round {i + 1}: baseline (guards off, no suppression entries), {n} messages"
                )
                runs[side] = pacing.paced(**common, env={"SMSGW_GUARDS": "0"}, setup=_guards_off)
            else:
                figures.say(
                    f"guards round {i + 1}: guarded ({suppressions} suppression entries, every guard on)"
                )
                setup = _guards_on(suppressions, loaded)
                runs[side] = pacing.paced(**common, env={"SMSGW_GUARDS": "1"}, setup=setup)
                with connection.cursor() as cur:
                    cur.execute("SELECT count(*) FROM delivery_knownnumber")
                    known = cur.fetchone()[0]
                    cur.execute("SELECT count(*) FROM delivery_reviewhold")
                    holds = cur.fetchone()[0]
        pairs.append((runs["off"], runs["on"], known, holds))
    tenant = data.bench_reset()
    _guards_on(suppressions, loaded)(tenant)
    figures.say("guards: the checks' own cost, in process, with the suppression list loaded")
    cost = checks_cost(tenant)
    data.bench_reset()
    _tables_empty()  # leave the bench database as the other scenarios expect it
    offs = [_throughput(off) for off, _, _, _ in pairs]
    ons = [_throughput(on) for _, on, _, _ in pairs]
    ratio = round(sum(ons) / sum(offs), 3) if pairs and all(offs) and all(ons) else None
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
        "checks_in_process": cost,
        "pipeline_cpu_ms_per_message_baseline": _cpu_total(pairs[0][0]) if pairs else None,
        "target": "ratio >= 0.95 (the checks cost at most 5% of the paced burst's throughput)",
        "meets_target": ratio is not None and ratio >= 0.95,
    }
