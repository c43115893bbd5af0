"""``python -m bench campaign_pause``: a campaign of N messages (1M by default) due now, paced sends through
real processes (sandbox, sweeper, send workers, beat); after some seconds of sending it is paused. Prints
how long after the pause call returned the provider still got submissions (target <= 2 s), and how long
reading the campaign's progress takes while all N exist and sending runs (target <= 50 ms): the counter
read itself (scheduling.campaigns.progress.progress_read, what GET /v1/campaigns/{id} serves) and the
admin's campaign list. Then resumes and reports how soon sending picks up again. Asserts nothing."""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime

from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone

from bench.harness import data, figures, topology
from delivery.models import Attempt, SenderCapacity
from delivery.providers.twilio.sandbox.process import DEFAULT_ACCOUNT_SID
from scheduling.campaigns import control as campaign_control
from scheduling.campaigns.progress import progress_add, progress_read
from scheduling.models import Campaign, CampaignCounter, Message

# The sender pool's column, from the model: its name and the field's differ for a release.
_POOL = Message._meta.get_field("sender_pool").column

PROVIDER = "twilio"


def _campaign_load(tenant, n: int) -> Campaign:
    """One campaign and its n messages due now, inserted in one statement (as the creation job would
    have made them, minus its per-batch work), counted as born."""
    CampaignCounter.objects.all().delete()
    Campaign.objects.all().delete()
    now = timezone.now()
    campaign = Campaign.objects.create(
        tenant=tenant,
        name="bench",
        status="active",
        body="Benchmark campaign",
        from_number=tenant.default_from,
        priority="bulk",
        validity_seconds=2 * 86400,
        recipients_total=n,
        messages_made=n,
        made_at=now,
    )
    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO scheduling_message (public_id, tenant_id, "to", from_number, __POOL__,
                body, encoding, segments, priority, metadata, requested_send_at, requested_timezone,
                dst_policy, dst_adjustment, due_at, expires_at, status, status_reason, version, run_after,
                attempt_count, provider, provider_status, error_code, created_at, updated_at,
                request_fingerprint, campaign_id, campaign_key, route_plan)
            SELECT 'msg_' || substr(md5(random()::text || g::text), 1, 24), %s,
                   '+1' || (2000000000 + g)::text, %s, '', 'Benchmark campaign', 'GSM-7', 1, 'bulk', '{}',
                   '', '', 'earlier', 'none', %s, %s + interval '2 days', 'scheduled', '', 1, %s, 0, %s,
                   '', '', now(), now(), '', %s, '+1' || (2000000000 + g)::text, '[]'
            FROM generate_series(1, %s) AS g
            """.replace("__POOL__", _POOL),
            [tenant.pk, tenant.default_from, now, now, now, PROVIDER, campaign.pk, n],
        )
        cur.execute("ANALYZE scheduling_message")
    progress_add([(campaign.pk, "scheduled", n)])
    return campaign


def _timings(fn, repeats: int) -> dict:
    out = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1000)
    out.sort()
    return {
        "p50_ms": round(statistics.median(out), 2),
        "p95_ms": round(out[int(len(out) * 0.95) - 1], 2),
        "max_ms": round(out[-1], 2),
        "reads": repeats,
    }


def _counter_contention(tenant, *, writers: int = 4, seconds: float = 3.0) -> dict:
    """Send workers finishing batches of one campaign at once: each outcome transaction moves the
    campaign's counters and holds those rows until it commits (here a 2 ms stand-in for the rest of
    that transaction). Commits/s with the shards, then with every writer on one row (shard 0)."""
    import threading

    from django.db import transaction

    from scheduling.campaigns import progress as campaign_progress

    campaign = Campaign.objects.create(
        tenant=tenant, name="contention", body="x", validity_seconds=60, status="active"
    )
    pause = threading.Event()  # never set: its wait() is the 2 ms the transaction stays open

    def run(one_row: bool) -> float:
        done = [0] * writers
        stop = time.monotonic() + seconds

        def writer(i: int) -> None:
            while time.monotonic() < stop:
                with transaction.atomic():
                    progress_add([(campaign.pk, "sending", -1), (campaign.pk, "sent", 1)])
                    pause.wait(0.002)
                done[i] += 1
            connection.close()

        original = campaign_progress.random.randrange
        if one_row:
            campaign_progress.random.randrange = lambda n: 0  # type: ignore[assignment]
        try:
            threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            campaign_progress.random.randrange = original  # type: ignore[assignment]
        return sum(done) / seconds

    sharded = run(False)
    single = run(True)
    CampaignCounter.objects.filter(campaign=campaign).delete()
    campaign.delete()
    return {
        "writers": writers,
        "sharded_commits_per_s": round(sharded),
        "one_row_commits_per_s": round(single),
        "ratio": round(sharded / single, 2) if single else None,
    }


def _admin_client() -> Client:
    user, _ = User.objects.get_or_create(
        username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    return client


def campaign_pause(
    *, n: int, rate: float, send_seconds: float, reads: int, paused_seconds: float, timeout: float
) -> dict:
    tenant = data.bench_reset()
    SenderCapacity.objects.create(
        provider=PROVIDER, account=DEFAULT_ACCOUNT_SID, sender=tenant.default_from, segments_per_second=rate
    )
    CampaignCounter.objects.all().delete()
    Campaign.objects.all().delete()
    contention = _counter_contention(tenant)
    figures.say(f"counter contention: {contention}")
    load_started = time.monotonic()
    campaign = _campaign_load(tenant, n)
    load_seconds = time.monotonic() - load_started
    figures.say(f"campaign_pause: {n} campaign messages loaded in {load_seconds:.1f} s; sending at {rate}/s")
    connection.close()
    topo = topology.Topology(latency_ms=0, send_concurrency=3)
    try:
        sandbox = topo.sandbox
        deadline = time.monotonic() + timeout
        while not sandbox.submissions(0) and time.monotonic() < deadline:
            time.sleep(0.2)
        first = min((r[0] for r in sandbox.submissions(0)), default=None)
        if first is None:
            return {"error": "nothing was submitted before the timeout"}
        while time.time() < first + send_seconds:
            time.sleep(0.2)

        # Progress reads while N messages exist and sending runs.
        progress = _timings(lambda: progress_read(campaign.pk), reads)
        client = _admin_client()
        admin_list = _timings(lambda: client.get("/admin/scheduling/campaign/"), max(reads // 10, 5))
        detail = _timings(lambda: client.get(f"/admin/scheduling/campaign/{campaign.pk}/change/"), 5)

        before = len(sandbox.submissions(0))
        called = time.time()
        campaign_control.campaign_pause(tenant=tenant, public_id=campaign.public_id, actor="bench")
        returned = time.time()
        connection.close()
        while time.time() < returned + paused_seconds:
            time.sleep(0.5)
        rows = sandbox.submissions(0)
        after = [r[0] for r in rows if r[0] > returned]
        last_after = max(after, default=returned)
        paused_progress = progress_read(campaign.pk)
        # Claims committed after the pause returned (the claim statement excludes a paused campaign).
        claims_after = Attempt.objects.filter(
            message__campaign=campaign, started_at__gt=datetime.fromtimestamp(returned, UTC)
        ).count()

        resumed_at = time.time()
        change = campaign_control.campaign_resume(tenant=tenant, public_id=campaign.public_id, actor="bench")
        resume_returned = time.time()
        connection.close()
        while time.time() < resume_returned + 15:
            rows = sandbox.submissions(last_after + 0.001)
            if [r for r in rows if r[0] > resume_returned]:
                break
            time.sleep(0.1)
        again = min((r[0] for r in sandbox.submissions(resume_returned)), default=None)
        return {
            "messages": n,
            "load_seconds": round(load_seconds, 1),
            "sender_rate": rate,
            "submitted_before_pause": before,
            "progress_read_while_sending": progress,
            "admin_campaign_list_while_sending": admin_list,
            "admin_campaign_detail_while_sending": detail,
            "pause_call_ms": round((returned - called) * 1000, 1),
            "submissions_after_pause_returned": len(after),
            "last_submission_after_pause_s": round(last_after - returned, 3),
            "target_pause_effective_s": 2.0,
            "claims_after_pause_returned": claims_after,
            "progress_while_paused": paused_progress,
            "resume_call_ms": round((resume_returned - resumed_at) * 1000, 1),
            "resume_released_in_request": change.released_now,
            "first_submission_after_resume_s": None if again is None else round(again - resume_returned, 3),
            "target_progress_read_ms": 50,
            "counter_contention": contention,
        }
    finally:
        topo.stop()
