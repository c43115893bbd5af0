"""``python -m bench uncertain``: submissions whose outcome the gateway cannot know, reconciled against a
Twilio-like provider that lags. Two runs in one command, on the same processes: the burst fault-free
(every fault rate 0, the same queue delay and list lag), then the same burst with the faults. Prints, per
run, the duplicates (target 0), the uncertain attempts and how many are left unresolved (target 0), how
long resolution took for the messages found at the provider and for those proven absent (from the
attempt's start to the verdict), and the drain time; then the ratio faulted / fault-free.

The faults (delivery/providers/twilio/sandbox/config.py): ``store_then_500`` / ``store_then_503`` (stored,
yet answered 5xx), ``answers_lost`` (stored, then the connection closed without an answer), ``absent``
(nothing stored, the answer later than the client's timeout), ``accept_then_hang`` (stored, the answer
later than the client's timeout). The sandbox keeps every message queued for ``queue_delay_ms`` and leaves it
out of the Messages
list for ``list_lag`` seconds; with ``callbacks`` it posts its status callbacks to a gunicorn + receipts
worker of ours (so a found message may be found by its callback), without them only the list (or a
fetch by sid) can find it. Asserts nothing."""

from __future__ import annotations

import math
import time
from collections import Counter
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from bench.harness import data, devprocs, figures, topology

# messages still in the gateway's hands; every other status has been submitted (or ended)
IN_PIPELINE = ("scheduled", "queued", "sending")
SUBMITTED = ("sent", "delivered", "undelivered")
VERDICTS = ("reconciled_found", "reconciled_absent", "reconciled_ambiguous")
# attempt outcomes of an attempt that was uncertain at some point (the verdict overwrites "uncertain")
UNCERTAIN_OUTCOMES = ("uncertain", "reconciled_found", "reconciled_absent", "reconciled_ambiguous")
# recipients of each run: distinct across runs, so nothing keyed by recipient carries over
WARM_UP_OFFSET, FAULT_FREE_OFFSET, FAULTED_OFFSET = 5_000_000, 0, 1_000_000


def spread(values: list[float]) -> dict:
    """count, p50, p90 and max (nearest rank) of ``values``, in seconds."""
    if not values:
        return {"count": 0}
    ordered = sorted(values)
    n = len(ordered)

    def rank(q: float) -> float:
        return round(ordered[min(n - 1, max(0, math.ceil(q * n) - 1))], 2)

    return {"count": n, "p50_s": rank(0.5), "p90_s": rank(0.9), "max_s": round(ordered[-1], 2)}


def uncertain(
    *,
    n: int,
    store_then_500: float,
    store_then_503: float,
    answers_lost: float,
    absent: float,
    accept_then_hang: float,
    list_lag: float,
    queue_delay_ms: int,
    callbacks: bool,
    client_timeout: float,
    first_look: int,
    absent_grace: int,
    reconcile_list_lag: int,
    concurrency: int,
    web_workers: int,
    timeout: float,
    fault_free: bool = True,
) -> dict:
    env = {
        "TWILIO_TIMEOUT_SECONDS": str(client_timeout),
        "SMSGW_SENDING_LEASE_SECONDS": str(max(5, int(client_timeout) + 4)),
        "SMSGW_QUEUED_RECOVERY_SECONDS": "10",
        "SMSGW_RECONCILE_FIRST_LOOK_SECONDS": str(first_look),
        "SMSGW_RECONCILE_ABSENT_GRACE_SECONDS": str(absent_grace),
        "SMSGW_RECONCILE_LIST_LAG_SECONDS": str(reconcile_list_lag),
    }
    port = devprocs.free_port() if callbacks else None
    if port:
        env["SMSGW_PUBLIC_BASE_URL"] = f"http://127.0.0.1:{port}"
    provider = {
        "queue_delay_ms": queue_delay_ms,
        "list_lag_seconds": list_lag,
        "callbacks_enabled": callbacks,
        "timeout_hang_seconds": client_timeout + 2,
    }
    faults = {
        "store_then_500_rate": store_then_500,
        "store_then_503_rate": store_then_503,
        "store_then_drop_rate": answers_lost,
        "timeout_rate": absent,
        "accept_then_hang_rate": accept_then_hang,
    }
    bound = client_timeout + absent_grace + reconcile_list_lag
    settings = {
        **env,
        "absent_resend_bound_s": bound,
        "absent_resend_bound": "TWILIO_TIMEOUT_SECONDS + grace + list lag (+ sweep/lease granularity)",
    }
    how = "ON (found may come from a callback)" if callbacks else "OFF (found only by list/fetch)"
    figures.say(
        f"uncertain: {n} messages per run; provider queue delay {queue_delay_ms} ms, "
        f"list lag {list_lag} s, callbacks {how}"
    )
    figures.say("uncertain: settings " + ", ".join(f"{k}={v}" for k, v in env.items()))
    _reset()  # before the processes start: nothing left by an interrupted run is swept or reconciled
    topo = topology.Topology(latency_ms=0, send_concurrency=concurrency, env=env)
    extra: list[devprocs.Proc] = []
    try:
        if port:
            # The receipt endpoint checks the sandbox's signatures with the auth token topo.env carries.
            extra.append(devprocs.gunicorn(topo.env, port=port, workers=web_workers))
            extra.append(
                devprocs.celery_worker("receipts", topo.env, queues="receipts,webhooks", concurrency=1)
            )
        # Unmeasured: fresh processes pay for first connections and imports.
        _run(topo, min(n, 1000), offset=WARM_UP_OFFSET, sandbox=provider, timeout=timeout, label="warm-up")
        clean = None
        if fault_free:
            clean = _run(
                topo, n, offset=FAULT_FREE_OFFSET, sandbox=provider, timeout=timeout, label="fault-free"
            )
        faulted = _run(
            topo, n, offset=FAULTED_OFFSET, sandbox={**provider, **faults}, timeout=timeout, label="faulted"
        )
    finally:
        for p in extra:
            p.stop()
        topo.stop()
    ratio = None
    if clean and clean["drain_s"] and faulted["drain_s"]:
        ratio = round(faulted["drain_s"] / clean["drain_s"], 2)
    result = {
        "scenario": "uncertain",
        "messages": n,
        "broker": topology.broker(),
        "faults": faults,
        "provider": provider,
        "callbacks": "on" if callbacks else "off",
        "reconcile_settings": settings,
        "fault_free": clean,
        "faulted": faulted,
        "ratio_drain_faulted_to_fault_free": ratio,
    }
    for line in summary_lines(result):
        figures.say(line)
    return result


def _reset():
    """Empty the tables a run reads. The workers keep running between runs (the sweeper's passes, the
    receipts worker on a late callback), so the TRUNCATE can deadlock with one of them: tried again."""
    from django.db import OperationalError, transaction

    for attempt in range(10):
        try:
            with transaction.atomic():
                tenant = data.bench_reset()
                with connection.cursor() as cur:
                    cur.execute("DELETE FROM delivery_duplicatesubmission")
                    cur.execute("TRUNCATE receipts_receiptevent, receipts_webhookdelivery")
            return tenant
        except OperationalError:
            if attempt == 9:
                raise
            time.sleep(1)
    raise AssertionError("unreachable")


def _run(topo: topology.Topology, n: int, *, offset: int, sandbox: dict, timeout: float, label: str) -> dict:
    topo.sandbox.reset()  # a clean store and counters, the start config, no callbacks still to post
    tenant = _reset()
    topo.sandbox.config(**sandbox)
    due = timezone.now() + timedelta(seconds=5)
    data.messages_load(tenant, n, first_due=due, offset=offset)
    with connection.cursor() as cur:
        cur.execute("ANALYZE scheduling_message")
    figures.say(f"uncertain ({label}): {n} messages due at {due.isoformat()}")
    left = n
    deadline = time.monotonic() + 5 + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM scheduling_message WHERE tenant_id = %s AND status = ANY(%s)",
                [tenant.pk, list(IN_PIPELINE)],
            )
            (left,) = cur.fetchone()
        if not left:
            break
        time.sleep(0.5)
    done_at = timezone.now()
    drain = (done_at - due).total_seconds() if not left else None
    return {"label": label, **_measure(topo, tenant.pk, n, due, drain, left)}


def _measure(topo: topology.Topology, tenant_id: int, n: int, due, drain: float | None, left: int) -> dict:
    stats = topo.sandbox.stats()
    per_to = Counter(row[3] for row in topo.sandbox.submissions())
    with connection.cursor() as cur:
        cur.execute(
            "SELECT status, count(*), max(sent_at) FROM scheduling_message WHERE tenant_id = %s GROUP BY 1",
            [tenant_id],
        )
        rows = cur.fetchall()
        statuses = {s: c for s, c, _ in rows}
        last_sent = max((t for s, _, t in rows if t and s in SUBMITTED), default=None)
        cur.execute(
            "SELECT a.outcome, count(*) FROM delivery_attempt a "
            "JOIN scheduling_message m ON m.id = a.message_id WHERE m.tenant_id = %s GROUP BY 1",
            [tenant_id],
        )
        attempts = dict(cur.fetchall())
        cur.execute("SELECT count(*) FROM delivery_duplicatesubmission")
        (duplicate_rows,) = cur.fetchone()
        cur.execute(
            "SELECT e.kind, count(*) FROM scheduling_messageevent e JOIN scheduling_message m "
            "ON m.id = e.message_id WHERE m.tenant_id = %s AND e.kind LIKE 'reconcil%%' GROUP BY 1",
            [tenant_id],
        )
        reconcile_events = dict(cur.fetchall())
        # Resolution: from the start of the attempt a verdict is about (the latest attempt begun at or
        # before it) to the verdict.
        cur.execute(
            "SELECT e.kind, e.details->>'source', COALESCE(e.details->>'rule', e.details->>'why'), "
            "e.details->>'provider_status', EXTRACT(EPOCH FROM (e.created_at - ("
            "SELECT max(a.started_at) FROM delivery_attempt a "
            "WHERE a.message_id = e.message_id AND a.started_at <= e.created_at))) "
            "FROM scheduling_messageevent e JOIN scheduling_message m ON m.id = e.message_id "
            "WHERE m.tenant_id = %s AND e.kind = ANY(%s)",
            [tenant_id, list(VERDICTS)],
        )
        verdicts = cur.fetchall()
        cur.execute(
            "SELECT count(*) FROM scheduling_message WHERE tenant_id = %s AND status = ANY(%s)",
            [tenant_id, list(SUBMITTED)],
        )
        (submitted,) = cur.fetchone()
        cur.execute(
            'SELECT count(DISTINCT "to") FROM scheduling_message WHERE tenant_id = %s AND status = ANY(%s)',
            [tenant_id, list(SUBMITTED)],
        )
        (distinct_recipients,) = cur.fetchone()
    found: dict[str, list[float]] = {}
    absent: dict[str, list[float]] = {}
    found_while_queued = 0
    for kind, source, rule, provider_status, seconds in verdicts:
        if seconds is None:
            continue
        if kind == "reconciled_found":
            found.setdefault(_label(source), []).append(float(seconds))
            found_while_queued += provider_status in ("queued", "accepted")
        elif kind == "reconciled_absent":
            absent.setdefault(_label(rule), []).append(float(seconds))
    all_found = [s for v in found.values() for s in v]
    all_absent = [s for v in absent.values() for s in v]
    uncertain_attempts = sum(attempts.get(k, 0) for k in UNCERTAIN_OUTCOMES)
    return {
        "messages": n,
        "all_sent": submitted >= n,
        "statuses": statuses,
        "left_in_pipeline": left,
        # due -> the moment no message was scheduled, queued or sending (polled every 0.5 s)
        "drain_s": round(drain, 1) if drain is not None else None,
        "due_to_last_sent_at_s": round((last_sent - due).total_seconds(), 1) if last_sent else None,
        "sandbox_submissions": stats["submissions"],
        "sandbox_by_outcome": {k: v for k, v in stats["by_outcome"].items() if v},
        "duplicates": stats["submissions"] - n,
        "recipients_submitted_twice": sum(1 for c in per_to.values() if c > 1),
        "duplicate_submission_rows": duplicate_rows,
        "distinct_recipients_submitted": distinct_recipients,
        "attempt_outcomes": attempts,
        "uncertain_attempts": uncertain_attempts,
        "unresolved_uncertain": attempts.get("uncertain", 0) + statuses.get("sending", 0),
        "reconcile_events": reconcile_events,
        "reconciled_ambiguous": reconcile_events.get("reconciled_ambiguous", 0),
        "found_while_still_queued_at_provider": found_while_queued,
        "resolution_found": {**spread(all_found), "by_source": {k: spread(v) for k, v in found.items()}},
        "resolution_absent": {**spread(all_absent), "by_rule": {k: spread(v) for k, v in absent.items()}},
    }


def _label(value: str | None) -> str:
    """A timeline's details.source / details.rule as a key: the design's short names as they are; a
    sentence (an older reconciler wrote its reasons out) cut to 40 characters."""
    if not value:
        return "unspecified"
    return value if len(value) <= 40 else value[:39] + "…"


def summary_lines(result: dict) -> list[str]:
    """The human-readable summary printed before the JSON."""
    rs = result["reconcile_settings"]
    out = [
        "",
        f"== bench uncertain: {result['messages']} messages, callbacks {result['callbacks']}, "
        f"faults {', '.join(f'{k}={v}' for k, v in result['faults'].items() if v) or 'none'}",
        f"   provider: queue delay {result['provider']['queue_delay_ms']} ms, "
        f"list lag {result['provider']['list_lag_seconds']} s",
        f"   reconcile: timeout {rs['TWILIO_TIMEOUT_SECONDS']} s, "
        f"first look {rs['SMSGW_RECONCILE_FIRST_LOOK_SECONDS']} s, "
        f"grace {rs['SMSGW_RECONCILE_ABSENT_GRACE_SECONDS']} s, "
        f"list lag {rs['SMSGW_RECONCILE_LIST_LAG_SECONDS']} s "
        f"-> absent resend bound {rs['absent_resend_bound_s']} s",
    ]

    def spread_text(s: dict) -> str:
        if not s.get("count"):
            return "0"
        return f"{s['count']} (p50 {s['p50_s']} s, p90 {s['p90_s']} s, max {s['max_s']} s)"

    for key in ("fault_free", "faulted"):
        run = result.get(key)
        if not run:
            continue
        out.append(
            f"   {key:10} drain {run['drain_s']} s; all sent {run['all_sent']}; submissions "
            f"{run['sandbox_submissions']}; duplicates {run['duplicates']} (recipients twice "
            f"{run['recipients_submitted_twice']}, "
            f"DuplicateSubmission rows {run['duplicate_submission_rows']})"
        )
        if run["uncertain_attempts"] or key == "faulted":
            out.append(
                f"   {'':10} uncertain {run['uncertain_attempts']}, "
                f"unresolved {run['unresolved_uncertain']}, ambiguous {run['reconciled_ambiguous']}"
            )
            found, absent = run["resolution_found"], run["resolution_absent"]
            out.append(f"   {'':10} found {spread_text(found)}")
            for source, s in found["by_source"].items():
                out.append(f"   {'':12} source {source}: {spread_text(s)}")
            out.append(f"   {'':10} absent {spread_text(absent)}")
            for rule, s in absent["by_rule"].items():
                out.append(f"   {'':12} rule {rule}: {spread_text(s)}")
    if result.get("ratio_drain_faulted_to_fault_free") is not None:
        out.append(f"   drain ratio faulted / fault-free: {result['ratio_drain_faulted_to_fault_free']}")
    return out
