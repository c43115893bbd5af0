"""Pausing and cancelling a campaign while it sends, across real processes: celery beat and its sweep, a
worker on every queue, gunicorn (the API and the status callbacks) and the sandbox provider. A campaign
of 300 messages is paced at 30 segments/s (about 10 s of sending); the pause (or cancel) is called through
the API mid-way. The sandbox records every submission with its time."""

from __future__ import annotations

import json
import time
import urllib.request
from collections import Counter

import pytest
from django.db import connection
from django.db.models import Count

from delivery.models import Attempt, SenderCapacity
from scheduling.campaigns.progress import progress_read
from scheduling.models import Message, Status
from tests.factories import SENDER, campaign_with_messages, tenant_with_key
from tests.harness import Pipeline, start_web
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

N = 300
# Segments/s for the campaign's sender: N messages take about 10 s, so the pause, called once a fifth is
# submitted, lands with much of the campaign still waiting even when a loaded machine answers it late
# (at 60/s a 3-s late pause found five sixths sent).
RATE = 30.0
# A paced message claimed before the pause and waiting for its slot is held back by the send process's
# view of the campaign (refreshed every 0.25 s); one already on the wire is not. Nothing goes later.
LATE_LIMIT_SECONDS = 2.0


def api_post(base: str, key: str, path: str) -> dict:
    req = urllib.request.Request(
        base + path, data=b"", method="POST", headers={"Authorization": f"Bearer {key}"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def api_get(base: str, key: str, path: str) -> dict:
    req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def group_by(campaign) -> dict[str, int]:
    rows = Message.objects.filter(campaign=campaign).values("status").annotate(n=Count("id"))
    return {r["status"]: r["n"] for r in rows}


def submitted(pipeline: Pipeline, ids) -> dict[str, list[float]]:
    """Recipient -> the instants the provider stored a submission for it (this campaign's only)."""
    tos = set(Message.objects.filter(pk__in=ids).values_list("to", flat=True))
    out: dict[str, list[float]] = {}
    for created, _sender, _segments, to in pipeline.sandbox.submissions(0):
        if to in tos:
            out.setdefault(to, []).append(created)
    return out


def claimed_before(ids, instant: float) -> set[str]:
    """Recipients whose message was claimed (an attempt committed) before ``instant``."""
    rows = Attempt.objects.filter(message_id__in=ids).values_list("message__to", "started_at")
    return {to for to, started in rows if started.timestamp() <= instant}


def start(pipeline: Pipeline):
    tenant, key = tenant_with_key("acme")
    SenderCapacity.objects.create(
        provider="twilio", account=pipeline.sandbox.account_sid, sender=SENDER, segments_per_second=RATE
    )
    pipeline.sandbox.config(callback_delay_ms=50, callback_gap_ms=20)
    base = start_web(pipeline)
    # The web's first requests load the URLs and the API (seconds on a loaded machine): made before the
    # campaign flows, so the pause is not the one that waits for them.
    pipeline.ready()
    for _ in range(4):
        api_get(base, key, "/v1/campaigns")
    campaign, ids = campaign_with_messages(tenant, N)
    connection.close()
    pipeline.worker("all")
    pipeline.beat()
    return campaign, ids, base, key


def midway(pipeline: Pipeline, ids) -> None:
    wait_for(
        lambda: len(submitted(pipeline, ids)) >= 60, 60, "a fifth of the campaign submitted", interval=0.1
    )


def test_pause_racing_the_sweep_stops_submissions_then_resume_delivers_each_once(pipeline):
    campaign, ids, base, key = start(pipeline)
    midway(pipeline, ids)
    body = api_post(base, key, f"/v1/campaigns/{campaign.public_id}/pause")
    paused_at = time.time()  # the pause call returned
    assert body["status"] == "paused"
    # Quiet: nothing of the campaign in flight any more.
    wait_for(
        lambda: not Message.objects.filter(pk__in=ids, status=Status.SENDING).exists(),
        30,
        "in-flight submissions landed",
    )
    wait_for(lambda: time.time() > paused_at + 3, 10, "three sweep intervals")
    during = submitted(pipeline, ids)
    in_flight = claimed_before(ids, paused_at)
    late = {to: max(ts) for to, ts in during.items() if max(ts) > paused_at}
    assert set(late) <= in_flight, (
        f"submitted after the pause without a claim before it: {set(late) - in_flight}"
    )
    assert all(t <= paused_at + LATE_LIMIT_SECONDS for t in late.values()), late
    assert not Attempt.objects.filter(message_id__in=ids, started_at__gt=_aware(paused_at + 0.5)).exists()
    waiting = Message.objects.filter(pk__in=ids, status__in=[Status.SCHEDULED, Status.QUEUED])
    assert waiting.count() >= N // 4, "paused mid-way: much of the campaign waits"
    assert set(waiting.values_list("reason_code", flat=True)) <= {"campaign_paused", "paced", ""}
    count_at_pause = len(during)

    wait_for(lambda: time.time() > paused_at + 4, 10, "another second paused")
    assert len(submitted(pipeline, ids)) == count_at_pause, "nothing more submitted while paused"

    resumed = api_post(base, key, f"/v1/campaigns/{campaign.public_id}/resume")
    assert resumed["status"] == "active"
    pipeline.wait_all_final(ids, timeout=120, final=(Status.DELIVERED,))
    per_to = submitted(pipeline, ids)
    assert len(per_to) == N and all(len(ts) == 1 for ts in per_to.values()), "each submitted exactly once"
    assert Counter(Message.objects.filter(pk__in=ids).values_list("status", flat=True)) == {
        Status.DELIVERED: N
    }
    wait_for(lambda: progress_read(campaign.pk) == group_by(campaign), 10, "counters settled")
    assert progress_read(campaign.pk) == {"delivered": N}
    wait_for(lambda: _status(campaign) == "completed", 30, "the campaign completed")


def test_cancel_mid_way_leaves_each_message_sent_before_or_cancelled(pipeline):
    campaign, ids, base, key = start(pipeline)
    midway(pipeline, ids)
    body = api_post(base, key, f"/v1/campaigns/{campaign.public_id}/cancel")
    cancelled_at = time.time()
    assert body["status"] == "cancelled" and body["cancellation"]["cancelled"] > 0
    wait_for(
        lambda: (
            not Message.objects.filter(
                pk__in=ids, status__in=[Status.SCHEDULED, Status.QUEUED, Status.SENDING, Status.SENT]
            ).exists()
        ),
        60,
        "every message delivered or cancelled",
    )
    per_to = submitted(pipeline, ids)
    in_flight = claimed_before(ids, cancelled_at)
    final = dict(Message.objects.filter(pk__in=ids).values_list("to", "status"))
    for to, status in final.items():
        if status == Status.DELIVERED:
            assert len(per_to.get(to, [])) == 1, to
            assert min(per_to[to]) <= cancelled_at or to in in_flight, f"{to} submitted after the cancel"
        else:
            assert status == Status.CANCELLED and to not in per_to, (to, status)
    late = [max(ts) for to, ts in per_to.items() if max(ts) > cancelled_at]
    assert all(t <= cancelled_at + LATE_LIMIT_SECONDS for t in late), late
    reasons = set(
        Message.objects.filter(pk__in=ids, status=Status.CANCELLED).values_list("reason_code", flat=True)
    )
    assert reasons == {"campaign_cancelled"}
    assert Counter(final.values())[Status.CANCELLED] >= N // 4
    assert progress_read(campaign.pk) == group_by(campaign)


def _aware(ts: float):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC)


def _status(campaign) -> str:
    campaign.refresh_from_db()
    return campaign.status
