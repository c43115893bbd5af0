"""Campaign control in-process against the real sandbox through the real Twilio adapter: counters exact
after every path a message can take, pause at the release step and at the send claim, a paced message
held back at its slot, cancel in batches with the single-message stage rules, completion, the API."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.models import Count
from django.utils import timezone
from rest_framework.test import APIClient

from delivery.sending import campaign_watch
from delivery.sending import worker as sending
from receipts.models import ReceiptEvent
from receipts.processor import receipts_process_due
from scheduling.campaigns import control as campaign_control
from scheduling.campaigns import gate as campaign_gate
from scheduling.campaigns.progress import SHARDS, progress_add, progress_read
from scheduling.dispatch import release, sweep
from scheduling.messages import final as final_messages
from scheduling.messages import service as services
from scheduling.models import Campaign, Message, Status
from smsgw.models import api_key_create
from tests.factories import campaign_with_messages, tenant_with_key
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")[0]


@pytest.fixture(autouse=True)
def _fresh_watch():
    campaign_watch.forget()
    yield
    campaign_watch.forget()


def group_by(campaign) -> dict[str, int]:
    rows = Message.objects.filter(campaign=campaign).values("status").annotate(n=Count("id"))
    return {r["status"]: r["n"] for r in rows}


def statuses(ids) -> Counter:
    return Counter(Message.objects.filter(pk__in=ids).values_list("status", flat=True))


def release_all() -> list[int]:
    """One release pass; the ids it queued (the published tasks are not run: the test sends them)."""
    release.due_release(limit=10_000)
    return list(
        Message.objects.filter(status=Status.QUEUED, published_at__isnull=False).values_list("id", flat=True)
    )


def receipt(msg: Message, status: str) -> None:
    now = timezone.now()
    ReceiptEvent.objects.create(
        provider="twilio",
        provider_message_id=msg.provider_message_id,
        raw_status=status,
        normalized_status=status,
        dedupe_key=f"twilio:{msg.provider_message_id}:{status}",
        received_at=now,
        next_try_at=now,
    )


def test_counters_equal_group_by_after_mixed_paths(adapter, sandbox, tenant):
    rng = random.Random(12)
    campaign, ids = campaign_with_messages(tenant, 60)
    # Some expire before they are sent, some are cancelled one by one, one is rejected by the provider.
    expiring = ids[:4]
    Message.objects.filter(pk__in=expiring).update(expires_at=timezone.now() - timedelta(seconds=1))
    sweep.due_expire(limit=100)
    for mid in rng.sample(ids[4:], 5):
        services.message_cancel(tenant=tenant, public_id=Message.objects.get(pk=mid).public_id, actor="t")
    rejected = Message.objects.filter(pk__in=ids, status=Status.SCHEDULED).order_by("id").first()
    sandbox.config(rules=[{"to": rejected.to, "action": "400", "error_code": 21211}])
    # A pause parks the due ones; resume releases them.
    campaign_control.campaign_pause(tenant=tenant, public_id=campaign.public_id, actor="t")
    assert release_all() == []
    assert progress_read(campaign.pk) == group_by(campaign)
    campaign_control.campaign_resume(tenant=tenant, public_id=campaign.public_id, actor="t")
    queued = release_all()
    assert len(queued) == 60 - 4 - 5
    for start in range(0, len(queued), 10):
        sending.send_batch(queued[start : start + 10])
    assert progress_read(campaign.pk) == group_by(campaign)
    sent = list(Message.objects.filter(pk__in=ids, status=Status.SENT).order_by("id"))
    for msg in sent:
        receipt(msg, rng.choice(["delivered", "delivered", "undelivered"]))
    receipts_process_due(limit=1000)
    # The rejected one is replayed (failed -> queued) and sent again.
    sandbox.config(rules=[])
    final_messages.message_replay(tenant=tenant, public_id=rejected.public_id, actor="t")
    sending.send_batch([rejected.pk])
    final = group_by(campaign)
    assert progress_read(campaign.pk) == final
    assert final["expired"] == 4 and final["cancelled"] == 5 and final["sent"] == 1
    assert final.get("delivered", 0) + final.get("undelivered", 0) == 50
    assert sum(final.values()) == 60


def test_pause_parks_due_messages_once_and_resume_releases_them(tenant):
    campaign, ids = campaign_with_messages(tenant, 30)
    change = campaign_control.campaign_pause(tenant=tenant, public_id=campaign.public_id, actor="key:t")
    assert change.changed and change.campaign.status == "paused" and change.campaign.paused_at
    for _ in range(3):  # later passes do not touch them again (run_after moved out of the due range)
        assert release_all() == []
    for msg in Message.objects.filter(pk__in=ids):
        assert (msg.status, msg.reason_code) == (Status.SCHEDULED, campaign_gate.REASON_PAUSED)
        assert msg.run_after == msg.expires_at  # waits at most until it expires
        assert list(msg.events.order_by("id").values_list("kind", flat=True)) == [
            "created",
            "campaign_paused",
        ]
    again = campaign_control.campaign_pause(tenant=tenant, public_id=campaign.public_id, actor="key:t")
    assert not again.changed
    resumed = campaign_control.campaign_resume(tenant=tenant, public_id=campaign.public_id, actor="key:t")
    assert resumed.campaign.status == "active" and resumed.released_now == 30 and not resumed.in_progress
    assert sorted(release_all()) == ids
    assert statuses(ids) == {Status.QUEUED: 30}
    assert progress_read(campaign.pk) == {"queued": 30}


def test_resume_of_a_campaign_still_being_made_goes_back_to_creating(tenant):
    campaign, _ = campaign_with_messages(tenant, 3, status="creating", made=False)
    campaign_control.campaign_pause(tenant=tenant, public_id=campaign.public_id, actor="t")
    change = campaign_control.campaign_resume(tenant=tenant, public_id=campaign.public_id, actor="t")
    assert change.campaign.status == "creating"


def test_send_claim_skips_a_paused_campaigns_queued_messages_and_parks_them(adapter, sandbox, tenant):
    campaign, ids = campaign_with_messages(tenant, 12)
    other = campaign_with_messages(tenant, 3)[1]  # another campaign's batch-mates go on
    queued = release_all()
    assert sorted(queued) == sorted(ids + other)
    campaign_control.campaign_pause(tenant=tenant, public_id=campaign.public_id, actor="t")
    report = sending.send_batch(queued)  # the task published before the pause reaches a worker
    assert report.claimed == 3
    assert sandbox.stats()["submissions"] == 3
    assert statuses(other) == {Status.SENT: 3}
    for msg in Message.objects.filter(pk__in=ids):
        assert (msg.status, msg.reason_code, msg.published_at) == (Status.QUEUED, "campaign_paused", None)
        assert msg.attempt_count == 0 and not msg.attempts.exists()
    assert release_all() == []  # not republished while paused (recovery does not take them for lost)
    campaign_control.campaign_resume(tenant=tenant, public_id=campaign.public_id, actor="t")
    again = release_all()
    assert sorted(again) == ids
    sending.send_batch(again)
    assert statuses(ids) == {Status.SENT: 12}
    assert sandbox.stats()["submissions"] == 15
    assert progress_read(campaign.pk) == group_by(campaign) == {"sent": 12}


@pytest.mark.django_db(transaction=True)
def test_paced_message_claimed_before_the_pause_is_not_submitted_at_its_slot(adapter, sandbox):
    tenant = tenant_with_key("paced")[0]
    campaign, ids = campaign_with_messages(tenant, 6)
    queued = release_all()
    # Slots far enough ahead that the claim commits (and the pause follows) before the first one, even
    # on a loaded machine.
    start = time.time() + 3.0
    slots = [start + 0.1 * i for i in range(len(queued))]
    failures: list[BaseException] = []

    def pause_once_claimed():
        try:
            wait_for(
                lambda: Message.objects.filter(pk__in=ids, status=Status.SENDING).count() == len(ids),
                start - time.time(),
                "the claim committed",
            )
            campaign_control.campaign_pause(tenant=tenant, public_id=campaign.public_id, actor="t")
        except BaseException as exc:  # reported in the test's thread below
            failures.append(exc)
        finally:
            connection.close()

    pauser = threading.Thread(target=pause_once_claimed)
    pauser.start()
    report = sending.send_batch(queued, not_before=slots)
    pauser.join()
    assert not failures, failures
    assert Campaign.objects.get(pk=campaign.pk).status == "paused"
    assert report.claimed == 6
    assert sandbox.stats()["submissions"] == 0, "nothing reaches the provider after the pause"
    for msg in Message.objects.filter(pk__in=ids):
        assert (msg.status, msg.reason_code) == (Status.QUEUED, "campaign_paused")
        assert msg.attempt_count == 0  # not charged
        assert msg.attempts.get().outcome == "transient_error"
    assert progress_read(campaign.pk) == {"queued": 6}


def test_cancel_cancels_pending_in_batches_and_leaves_those_with_the_provider(
    adapter, sandbox, tenant, monkeypatch
):
    monkeypatch.setattr(campaign_control, "BATCH_SIZE", 10)
    campaign, ids = campaign_with_messages(tenant, 45)
    queued = release_all()[:20]
    sending.send_batch(queued[:5])  # 5 are with the provider already
    change = campaign_control.campaign_cancel(tenant=tenant, public_id=campaign.public_id, actor="t")
    assert change.campaign.status == "cancelled" and change.campaign.cancelled_at
    assert change.cancelled_now == 10 and change.in_progress  # one batch in the request, the rest later
    # Nothing more is claimed once the cancel committed, even from a task published before it.
    report = sending.send_batch(queued[5:])
    assert report.claimed == 0
    done = campaign_control.cancel_pending(campaign.pk)
    assert done[1]
    final = statuses(ids)
    assert final == {Status.SENT: 5, Status.CANCELLED: 40}
    cancelled = Message.objects.filter(pk__in=ids, status=Status.CANCELLED)
    assert set(cancelled.values_list("reason_code", flat=True)) == {"campaign_cancelled"}
    assert progress_read(campaign.pk) == group_by(campaign) == {"sent": 5, "cancelled": 40}
    campaign.refresh_from_db()
    assert campaign.status_reason == "cancelled"
    repeat = campaign_control.campaign_cancel(tenant=tenant, public_id=campaign.public_id, actor="t")
    assert not repeat.changed and not repeat.in_progress
    assert sandbox.stats()["submissions"] == 5


def test_a_crashed_cancel_is_finished_by_the_tick(tenant, monkeypatch):
    monkeypatch.setattr(campaign_control, "BATCH_SIZE", 5)
    campaign, ids = campaign_with_messages(tenant, 23)
    campaign_control.campaign_cancel(tenant=tenant, public_id=campaign.public_id, actor="t")
    assert statuses(ids)[Status.SCHEDULED] == 18  # its task never ran (the worker died)
    report = campaign_control.campaigns_tick()
    assert report["cancelled"] == 18
    assert statuses(ids) == {Status.CANCELLED: 23}


def test_messages_of_a_cancelled_campaign_made_late_are_cancelled_at_release(tenant):
    campaign, ids = campaign_with_messages(tenant, 4)
    Campaign.objects.filter(pk=campaign.pk).update(status="cancelled")  # as if made after the cancel ran
    assert release_all() == []
    assert statuses(ids) == {Status.CANCELLED: 4}
    assert progress_read(campaign.pk) == {"cancelled": 4}


def test_completed_when_made_and_nothing_is_pending(adapter, sandbox, tenant):
    campaign, ids = campaign_with_messages(tenant, 5)
    making, _ = campaign_with_messages(tenant, 0, status="creating", made=False)
    assert campaign_control.campaigns_tick()["completed"] == 0
    sending.send_batch(release_all())
    assert statuses(ids) == {Status.SENT: 5}
    assert campaign_control.campaigns_tick()["completed"] == 1
    campaign.refresh_from_db()
    making.refresh_from_db()
    assert campaign.status == "completed" and campaign.completed_at
    assert making.status == "creating"


@pytest.mark.django_db(transaction=True)
def test_concurrent_counter_writers_on_different_shards_do_not_wait_for_each_other(monkeypatch):
    """Send workers finishing batches of one campaign at once: each transaction holds its counter row
    until commit; with shards, a second writer does not queue behind the first."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL")
    tenant = tenant_with_key("shards")[0]
    campaign, _ = campaign_with_messages(tenant, 0)
    shard_of = {}
    monkeypatch.setattr(
        "scheduling.campaigns.progress.random.randrange", lambda n: shard_of[threading.get_ident()]
    )
    holding, done = threading.Event(), threading.Event()
    waited = []

    def first():
        shard_of[threading.get_ident()] = 0
        with transaction.atomic():
            progress_add([(campaign.pk, "sent", 1)])
            holding.set()
            done.wait(5)
        connection.close()

    def second(shard):
        shard_of[threading.get_ident()] = shard
        started = time.monotonic()
        with transaction.atomic():
            progress_add([(campaign.pk, "sent", 1)])
        waited.append(time.monotonic() - started)
        connection.close()

    t1 = threading.Thread(target=first)
    t1.start()
    holding.wait(5)
    t2 = threading.Thread(target=second, args=(SHARDS - 1,))
    t2.start()
    t2.join(3)
    assert not t2.is_alive(), "a writer on another shard does not wait for the open transaction"
    done.set()
    t1.join()
    assert progress_read(campaign.pk) == {"sent": 2}
    assert waited[0] < 1.0


def test_api_pause_resume_cancel_answer_progress_and_scope_to_the_tenant(api, monkeypatch):
    monkeypatch.setattr(campaign_control, "BATCH_SIZE", 4)
    campaign, _ = campaign_with_messages(api.tenant, 9)
    other_tenant = tenant_with_key("other")[0]
    foreign, foreign_ids = campaign_with_messages(other_tenant, 2)
    for action in ("pause", "resume", "cancel"):
        resp = api.post(f"/v1/campaigns/{foreign.public_id}/{action}")
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"
    foreign.refresh_from_db()
    assert foreign.status == "active" and statuses(foreign_ids) == {Status.SCHEDULED: 2}

    body = api.post(f"/v1/campaigns/{campaign.public_id}/pause").json()
    assert (body["id"], body["status"], body["changed"]) == (campaign.public_id, "paused", True)
    assert body["progress"] == {"scheduled": 9} and body["timestamps"]["paused_at"]
    assert api.post(f"/v1/campaigns/{campaign.public_id}/pause").json()["changed"] is False
    body = api.post(f"/v1/campaigns/{campaign.public_id}/resume").json()
    assert body["status"] == "active" and body["release"] == {"released": 0, "in_progress": False}
    body = api.post(f"/v1/campaigns/{campaign.public_id}/cancel").json()
    assert body["status"] == "cancelled"
    assert body["cancellation"] == {"cancelled": 4, "pending": 5, "too_late": {}, "in_progress": True}
    resp = api.post(f"/v1/campaigns/{campaign.public_id}/pause")
    assert resp.status_code == 409
    assert resp.json()["error"]["status"] == "cancelled" and "cancelled" in resp.json()["error"]["message"]
    assert api.post(f"/v1/campaigns/{campaign.public_id}/resume").status_code == 409
    campaign.refresh_from_db()
    assert campaign.status == "cancelled"  # the refused requests changed nothing


def test_a_completed_campaign_cannot_be_paused_or_cancelled(api):
    campaign, _ = campaign_with_messages(api.tenant, 0, status="completed")
    for action in ("pause", "cancel", "resume"):
        resp = api.post(f"/v1/campaigns/{campaign.public_id}/{action}")
        assert resp.status_code == 409 and resp.json()["error"]["status"] == "completed"


def test_a_campaign_paused_by_an_operator_says_so_without_the_operators_name(tenant):
    campaign, _ = campaign_with_messages(tenant, 2)
    campaign_control.campaign_pause(tenant=tenant, public_id=campaign.public_id, actor="admin:alice")
    assert Campaign.objects.get(pk=campaign.pk).status_reason == "paused by admin:alice"  # the admin's view
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key_create(tenant=tenant)[1]}")
    shown = api.get(f"/v1/campaigns/{campaign.public_id}").json()
    assert shown["status_reason"] == "paused by operator"
