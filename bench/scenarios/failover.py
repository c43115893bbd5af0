"""``python -m bench failover``: messages routed US → [twilio, vonage (weight 0, a standby)] due at a
steady rate, with Twilio's sandbox answering 503 (nothing stored) for ``outage_seconds`` in the middle
of the load, then recovering. Both providers are sandbox processes; beat, the sweeper and the send
workers are real processes on PostgreSQL and the broker.

The messages are born through ``scheduling.messages.birth.messages_birth`` (dict rows, as a schedule's
occurrences or a campaign's recipients are), so each gets its route and plan at birth
(``delivery.routing.birth.rows_route``). A Twilio 503 is an uncertain answer (nothing says the request
was not processed): those messages stay ``sending`` on Twilio until the reconciler proves them absent
and only then move to Vonage; once the circuit is open, the release step and the claim move the
waiting messages to Vonage before any call. The sandbox's Messages list does not lag, so the bench runs
with a short ``SMSGW_RECONCILE_LIST_LAG_SECONDS`` (``--reconcile-list-lag``; production default 150 s)
and prints it.

Prints: throughput (messages handed over per second at either sandbox) before, during and after the
outage; the time from the first 503 to the first Vonage submission; duplicates across both providers
(a recipient stored at both sandboxes, or twice at one: each message has its own recipient; target 0);
failed (target 0); lag (handed over minus due) p99 of the messages due during the outage and of all;
how many went through each provider; Twilio's share of the submissions after the recovery. Duplicates
and failed messages are listed with their timelines. Asserts nothing."""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from bench.harness import data, figures, topology
from scheduling.messages.birth import messages_birth
from scheduling.models import Status, new_public_id
from smsgw.config import routes as route_config

PRIMARY, STANDBY = "twilio", "vonage"
STANDBY_SENDER = "ACME"
ROUTES = [
    {
        "name": "us-failover",
        "country": "US",
        "legs": [
            {"provider": PRIMARY},
            {"provider": STANDBY, "sender": STANDBY_SENDER, "weight": 0},
        ],
    }
]
IN_PIPELINE = ("scheduled", "queued", "sending")
SUBMITTED = ("sent", "delivered", "undelivered")
FIRST_RECIPIENT = 2_000_000  # +1415 2000000, +1415 2000001, ...: one recipient per message
ACTOR = "system:bench"


def recipient(i: int) -> str:
    return f"+1415{FIRST_RECIPIENT + i:07d}"


def nearest_rank(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))], 3)


def failover(
    *,
    n: int,
    rate: float,
    outage_at: float,
    outage_seconds: float,
    concurrency: int,
    timeout: float,
    reconcile_list_lag: int = 5,
    lead_seconds: float = 10.0,
    env: dict[str, str] | None = None,
) -> dict:
    """``env``: more environment for the worker processes (a test points them at its database and
    shortens the reconcile windows)."""
    from delivery.providers.vonage.sandbox.process import VonageSandboxProcess

    span = n / rate
    env = {
        "SMSGW_ROUTES": json.dumps(ROUTES),
        "SMSGW_RECONCILE_LIST_LAG_SECONDS": str(reconcile_list_lag),
        **(env or {}),
    }
    tenant = _reset()
    own_routes = settings.SMSGW_ROUTES
    vonage = VonageSandboxProcess()
    vonage.start()
    topo = None
    try:
        env.update(
            VONAGE_API_KEY=vonage.api_key,
            VONAGE_API_SECRET=vonage.api_secret,
            VONAGE_SIGNATURE_SECRET="",
            VONAGE_REST_HOST=vonage.rest_host,
            VONAGE_CA_BUNDLE=vonage.ca_file,
        )
        # This process gives the messages their routes at birth: the same rules as the workers'.
        settings.SMSGW_ROUTES = route_config.parse(
            env["SMSGW_ROUTES"], [PRIMARY, STANDBY], ("transactional", "bulk")
        )
        topo = topology.Topology(latency_ms=0, send_concurrency=concurrency, env=env)
        figures.say(
            f"failover: {n} messages at {rate:g}/s ({span:.1f} s of due times), routed US -> "
            f"[{PRIMARY}, {STANDBY} (weight 0, sender {STANDBY_SENDER})]; {PRIMARY} answers 503 for "
            f"{outage_seconds:g} s from {outage_at * span:.1f} s after the first due moment"
        )
        figures.say(
            f"failover: SMSGW_RECONCILE_LIST_LAG_SECONDS={reconcile_list_lag} "
            "(the sandbox's list does not lag)"
        )
        # Born due an hour ahead (births take seconds on a busy machine), then moved to ``lead_seconds``
        # from now in one statement, so that the first message is not already late.
        loaded_in = _load(tenant, n, first_due=timezone.now() + timedelta(hours=1), rate=rate)
        first_due = timezone.now() + timedelta(seconds=lead_seconds)
        _shift(tenant.pk, first_due)
        figures.say(
            f"failover: born {n} routed messages in {loaded_in:.1f} s; first due {first_due.isoformat()}"
        )
        down_at_planned = first_due.timestamp() + outage_at * span
        _sleep_until(down_at_planned)
        topo.sandbox.config(outage="503")
        down_at = time.time()
        figures.say(f"failover: {PRIMARY} answers 503 from {_iso(down_at)}")
        _sleep_until(down_at + outage_seconds)
        topo.sandbox.config(outage="none")
        up_at = time.time()
        answered_503 = topo.sandbox.stats()["by_outcome"].get("outage_503", 0)
        figures.say(f"failover: {PRIMARY} recovered at {_iso(up_at)} ({answered_503} requests answered 503)")
        left = _wait_drained(tenant.pk, max(0.0, first_due.timestamp() + span - time.time()) + timeout)
        result = _measure(topo, vonage, tenant.pk, n, first_due, down_at, up_at, left)
        result.update(
            {
                "messages": n,
                "rate_per_s": rate,
                "outage_seconds": outage_seconds,
                "outage_from_first_due_s": round(down_at - first_due.timestamp(), 2),
                "requests_answered_503": answered_503,
                "birth_s": round(loaded_in, 2),
                "broker": topology.broker(),
                "settings": {
                    **{
                        # What the workers ran with: their environment, else this process's settings.
                        f"SMSGW_{name}": topo.env.get(f"SMSGW_{name}", str(getattr(settings, name)))
                        for name in (
                            "RECONCILE_LIST_LAG_SECONDS",
                            "RECONCILE_FIRST_LOOK_SECONDS",
                            "RECONCILE_ABSENT_GRACE_SECONDS",
                            "RECONCILE_MIN_WAIT_SECONDS",
                            "FAILOVER_RETRY_ATTEMPTS",
                            "CIRCUIT_STREAK_FAILURES",
                        )
                    },
                    "concurrency": concurrency,
                },
            }
        )
    finally:
        settings.SMSGW_ROUTES = own_routes
        if topo is not None:
            topo.stop()
        vonage.stop()
    for line in summary_lines(result):
        figures.say(line)
    return result


def _reset():
    from smsgw.tenancy.senders import sender_assign

    tenant = data.bench_reset()  # the pacing state and circuits too
    # A leg's sender carries only the messages of a tenant that owns it (smsgw.tenancy.senders): without
    # it the standby leg is skipped and nothing fails over.
    with transaction.atomic():
        sender_assign(tenant=tenant, sender=STANDBY_SENDER)
    with connection.cursor() as cur:
        cur.execute("DELETE FROM delivery_duplicatesubmission")
    return tenant


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S.%f")[:-3]


def _sleep_until(ts: float) -> None:
    while (left := ts - time.time()) > 0:
        time.sleep(min(left, 0.5))


def _load(tenant, n: int, *, first_due, rate: float) -> float:
    """Birth n messages due ``1/rate`` s apart from ``first_due``, through messages_birth (routed)."""
    started = time.monotonic()
    now = timezone.now()
    sender = tenant.default_from or "+14155550100"
    batch = 2000
    for start in range(0, n, batch):
        rows = []
        for i in range(start, min(n, start + batch)):
            due = first_due + timedelta(seconds=i / rate)
            rows.append(
                (
                    {
                        "public_id": new_public_id(),
                        "tenant_id": tenant.pk,
                        "to": recipient(i),
                        "from_number": sender,
                        "sender_pool": "",
                        "body": f"Benchmark message {i}",
                        "encoding": "GSM-7",
                        "segments": 1,
                        "priority": "transactional",
                        "metadata": {},
                        "requested_send_at": "",
                        "requested_timezone": "",
                        "dst_policy": "earlier",
                        "dst_adjustment": "none",
                        "due_at": due,
                        "expires_at": due + timedelta(days=2),
                        "status": Status.SCHEDULED.value,
                        "status_reason": "",
                        "version": 1,
                        "run_after": due,
                        "attempt_count": 0,
                        "provider_status": "",
                        "error_code": "",
                        "request_fingerprint": "",
                        "created_at": now,
                        "updated_at": now,
                    },
                    {"source": "bench"},
                )
            )
        with transaction.atomic():
            messages_birth(rows, actor=ACTOR, now=now, tenants={tenant.pk: tenant})
    with connection.cursor() as cur:
        cur.execute("ANALYZE scheduling_message")
    return time.monotonic() - started


def _shift(tenant_id: int, first_due) -> None:
    """Move every message of the run so that the first is due at ``first_due``, keeping their spacing."""
    with connection.cursor() as cur:
        cur.execute(
            "WITH d AS (SELECT %s - min(due_at) AS delta FROM scheduling_message WHERE tenant_id = %s) "
            "UPDATE scheduling_message m SET due_at = m.due_at + d.delta, run_after = m.run_after + d.delta, "
            "expires_at = m.expires_at + d.delta FROM d WHERE m.tenant_id = %s",
            [first_due, tenant_id, tenant_id],
        )


def _wait_drained(tenant_id: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    left = -1
    while time.monotonic() < deadline:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM scheduling_message WHERE tenant_id = %s AND status = ANY(%s)",
                [tenant_id, list(IN_PIPELINE)],
            )
            (left,) = cur.fetchone()
        if not left:
            break
        time.sleep(0.5)
    return left


def windows(
    handed: list[tuple[float, str]], first_due: float, down_at: float, up_at: float
) -> dict[str, dict]:
    """Submissions per second at either provider in [first due, outage), [outage, recovery) and
    [recovery, last submission], with each provider's count in the window."""
    last = max((t for t, _ in handed), default=up_at)
    bounds = {"before": (first_due, down_at), "during": (down_at, up_at), "after": (up_at, max(last, up_at))}
    out = {}
    for name, (lo, hi) in bounds.items():
        inside = [p for t, p in handed if lo <= t < hi or (name == "after" and t == hi)]
        seconds = hi - lo
        by = Counter(inside)
        out[name] = {
            "seconds": round(seconds, 1),
            "submissions": len(inside),
            "per_s": round(len(inside) / seconds, 1) if seconds > 0 else None,
            "by_provider": {p: by.get(p, 0) for p in (PRIMARY, STANDBY)},
        }
    return out


def duplicates(primary_to: list[str], standby_to: list[str]) -> dict:
    """Recipients stored more than once across both providers (each message has its own recipient)."""
    a, b = Counter(primary_to), Counter("+" + t.lstrip("+") for t in standby_to)
    both = set(a) & set(b)
    total = a + b
    return {
        "extra_submissions": sum(c - 1 for c in total.values() if c > 1),
        "recipients_more_than_once": sorted(t for t, c in total.items() if c > 1),
        "recipients_at_both": len(both),
        "recipients_twice_at_primary": sum(1 for c in a.values() if c > 1),
        "recipients_twice_at_standby": sum(1 for c in b.values() if c > 1),
    }


def _measure(
    topo, vonage, tenant_id: int, n: int, first_due, down_at: float, up_at: float, left: int
) -> dict:
    primary_rows = topo.sandbox.submissions(0)  # [created_unix, sender, segments, to]
    standby_parts = vonage.messages()
    handed_by_to: dict[str, float] = {}
    handed: list[tuple[float, str]] = []
    for created, _sender, _segments, to in primary_rows:
        handed.append((float(created), PRIMARY))
        handed_by_to.setdefault(to, float(created))
    for part in standby_parts:
        handed.append((float(part["created_at"]), STANDBY))
        handed_by_to.setdefault("+" + part["to"].lstrip("+"), float(part["created_at"]))
    handed.sort()
    dup = duplicates([r[3] for r in primary_rows], [p["to"] for p in standby_parts])
    first_standby = min((t for t, p in handed if p == STANDBY), default=None)
    with connection.cursor() as cur:
        cur.execute(
            "SELECT status, count(*) FROM scheduling_message WHERE tenant_id = %s GROUP BY 1", [tenant_id]
        )
        statuses = dict(cur.fetchall())
        # The first 503 as our workers saw it: the earliest finished attempt on the primary answered 503.
        cur.execute(
            "SELECT min(a.finished_at) FROM delivery_attempt a "
            "JOIN scheduling_message m ON m.id = a.message_id "
            "WHERE m.tenant_id = %s AND a.provider = %s AND a.http_status = 503",
            [tenant_id, PRIMARY],
        )
        (first_503,) = cur.fetchone()
        cur.execute(
            'SELECT "to", extract(epoch FROM due_at) FROM scheduling_message WHERE tenant_id = %s',
            [tenant_id],
        )
        due_by_to = {to: float(due) for to, due in cur.fetchall()}
        cur.execute(
            "SELECT a.provider, a.outcome, count(*) FROM delivery_attempt a "
            "JOIN scheduling_message m ON m.id = a.message_id WHERE m.tenant_id = %s GROUP BY 1, 2",
            [tenant_id],
        )
        attempts = {f"{p}:{o}": c for p, o, c in cur.fetchall()}
        cur.execute(
            "SELECT e.details->>'why', count(*) FROM scheduling_messageevent e JOIN scheduling_message m "
            "ON m.id = e.message_id WHERE m.tenant_id = %s AND e.kind = 'failover' GROUP BY 1",
            [tenant_id],
        )
        failovers = dict(cur.fetchall())
        cur.execute(
            "SELECT e.kind, count(*) FROM scheduling_messageevent e JOIN scheduling_message m "
            "ON m.id = e.message_id WHERE m.tenant_id = %s AND e.kind LIKE 'reconcil%%' GROUP BY 1",
            [tenant_id],
        )
        reconcile_events = dict(cur.fetchall())
        cur.execute(
            "SELECT provider, count(*) FROM scheduling_message WHERE tenant_id = %s AND status = ANY(%s) "
            "GROUP BY 1",
            [tenant_id, list(SUBMITTED)],
        )
        submitted_by_provider = dict(cur.fetchall())
    lags_all, lags_during = [], []
    for to, t in handed_by_to.items():
        due = due_by_to.get(to)
        if due is None:
            continue
        lags_all.append(t - due)
        if down_at <= due < up_at:
            lags_during.append(t - due)
    win = windows(handed, first_due.timestamp(), down_at, up_at)
    after = win["after"]
    failed = statuses.get("failed", 0)
    troubled = dup["recipients_more_than_once"][:20]
    result = {
        "scenario": "failover",
        "all_submitted": len(handed_by_to) >= n,
        "statuses": statuses,
        "left_in_pipeline": left,
        "failed": failed,
        "throughput": win,
        "first_503_at": first_503.isoformat() if first_503 else None,
        "first_standby_submission_at": _iso(first_standby) if first_standby else None,
        "first_503_to_first_standby_s": (
            round(first_standby - first_503.timestamp(), 2) if first_503 and first_standby else None
        ),
        "outage_start_to_first_standby_s": round(first_standby - down_at, 2) if first_standby else None,
        "submissions_by_provider": {PRIMARY: len(primary_rows), STANDBY: len(standby_parts)},
        "messages_submitted_by_provider": submitted_by_provider,
        "duplicates": dup["extra_submissions"],
        "duplicate_detail": {k: v for k, v in dup.items() if k != "recipients_more_than_once"},
        "lag_during_outage": {
            "due_during": len(lags_during),
            "p50_s": nearest_rank(lags_during, 0.5),
            "p99_s": nearest_rank(lags_during, 0.99),
            "max_s": round(max(lags_during), 3) if lags_during else None,
        },
        "lag_all": {
            "count": len(lags_all),
            "p50_s": nearest_rank(lags_all, 0.5),
            "p99_s": nearest_rank(lags_all, 0.99),
            "max_s": round(max(lags_all), 3) if lags_all else None,
        },
        "primary_share_after_recovery": (
            round(after["by_provider"][PRIMARY] / after["submissions"], 3) if after["submissions"] else None
        ),
        "primary_return_after_recovery_s": _first_primary_after(handed, up_at),
        "after_recovery_by_15s": returned(handed, up_at),
        "attempts": attempts,
        "failover_events_by_why": failovers,
        "reconcile_events": reconcile_events,
        "troubled_messages": _timelines(tenant_id, troubled) if troubled or failed else [],
    }
    if failed and not troubled:
        result["troubled_messages"] = _timelines(tenant_id, [], failed_only=True)
    return result


def returned(handed: list[tuple[float, str]], up_at: float, bucket: float = 15.0, buckets: int = 40) -> list:
    """``[seconds after recovery, primary, standby]`` per ``bucket`` seconds after the recovery, until
    the last submission (at most ``buckets``): how the traffic went back to the primary."""
    out = []
    for i in range(buckets):
        lo, hi = up_at + i * bucket, up_at + (i + 1) * bucket
        inside = Counter(p for t, p in handed if lo <= t < hi)
        if not inside and all(t < lo for t, _ in handed):
            break
        out.append([int(i * bucket), inside.get(PRIMARY, 0), inside.get(STANDBY, 0)])
    return out


def _first_primary_after(handed: list[tuple[float, str]], up_at: float) -> float | None:
    first = next((t for t, p in handed if p == PRIMARY and t >= up_at), None)
    return round(first - up_at, 2) if first is not None else None


def _timelines(tenant_id: int, recipients: list[str], failed_only: bool = False) -> list[dict]:
    """The public id, status and timeline kinds (with the failover reasons) of the messages to the
    given recipients, and of up to 20 failed messages."""
    with connection.cursor() as cur:
        cur.execute(
            'SELECT id, public_id, "to", status, provider, route_leg FROM scheduling_message '
            "WHERE tenant_id = %s AND (\"to\" = ANY(%s) OR status = 'failed') ORDER BY id LIMIT 40",
            [tenant_id, recipients],
        )
        messages = cur.fetchall()
        out = []
        for mid, public_id, to, status, provider, leg in messages:
            cur.execute(
                "SELECT kind, COALESCE(details->>'why', '') FROM scheduling_messageevent "
                "WHERE message_id = %s ORDER BY id",
                [mid],
            )
            kinds = [f"{k}({w})" if w else k for k, w in cur.fetchall()]
            out.append(
                {
                    "public_id": public_id,
                    "to": to[:-4] + "****",
                    "status": status,
                    "provider": provider,
                    "route_leg": leg,
                    "timeline": kinds,
                }
            )
    return out


def summary_lines(r: dict) -> list[str]:
    """The human-readable summary printed before the JSON."""
    w = r["throughput"]

    def window(name: str) -> str:
        x = w[name]
        by = x["by_provider"]
        return (
            f"   {name:7} {x['per_s']} msg/s over {x['seconds']} s "
            f"({x['submissions']}: {PRIMARY} {by[PRIMARY]}, {STANDBY} {by[STANDBY]})"
        )

    s = r["settings"]
    ld, la = r["lag_during_outage"], r["lag_all"]
    out = [
        "",
        f"== bench failover: {r['messages']} messages at {r['rate_per_s']:g}/s, {PRIMARY} 503 for "
        f"{r['outage_seconds']:g} s from {r['outage_from_first_due_s']} s after the first due moment "
        f"({r['requests_answered_503']} requests answered 503)",
        f"   reconcile list lag {s['SMSGW_RECONCILE_LIST_LAG_SECONDS']} s (sandbox list does not lag), "
        f"first look {s['SMSGW_RECONCILE_FIRST_LOOK_SECONDS']} s, grace "
        f"{s['SMSGW_RECONCILE_ABSENT_GRACE_SECONDS']} s; {s['concurrency']} send processes",
        "   throughput (handed over at either provider):",
        window("before"),
        window("during"),
        window("after"),
        f"   first 503 -> first {STANDBY} submission: {r['first_503_to_first_standby_s']} s "
        f"(outage start -> first {STANDBY}: {r['outage_start_to_first_standby_s']} s)",
        f"   duplicates across both providers: {r['duplicates']} (target 0); "
        f"failed: {r['failed']} (target 0); "
        f"left in pipeline: {r['left_in_pipeline']}",
        f"   lag (handed over - due), due during the outage ({ld['due_during']}): p50 {ld['p50_s']} s, "
        f"p99 {ld['p99_s']} s, max {ld['max_s']} s",
        f"   lag, all ({la['count']}): p50 {la['p50_s']} s, p99 {la['p99_s']} s, max {la['max_s']} s",
        f"   by provider: {', '.join(f'{k} {v}' for k, v in r['submissions_by_provider'].items())}",
        f"   after recovery: {PRIMARY} share {r['primary_share_after_recovery']} of the after window's "
        f"submissions; first {PRIMARY} submission {r['primary_return_after_recovery_s']} s after recovery",
        f"   after recovery, per 15 s [{PRIMARY}/{STANDBY}]: "
        + " ".join(f"+{lo}s {a}/{b}" for lo, a, b in r["after_recovery_by_15s"]),
        f"   failovers by why: {r['failover_events_by_why']}; reconcile: {r['reconcile_events']}",
    ]
    for m in r.get("troubled_messages") or []:
        out.append(
            f"   ! {m['public_id']} {m['to']} {m['status']} on {m['provider']}: {' > '.join(m['timeline'])}"
        )
    return out
