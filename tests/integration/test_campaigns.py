"""Campaigns across real processes on PostgreSQL: POST /v1/campaigns (JSON, and a CSV upload through a
real gunicorn) made into messages by a real celery worker on the ``campaigns`` queue, and a worker whose
pool process (of two, making a list in four line ranges) is killed with SIGKILL in the middle of a job,
redelivered and resumed from its range's checkpoint.
Each test checks that every recipient has exactly one message and its final state."""

from __future__ import annotations

import os
import signal
from collections import Counter
from datetime import timedelta

import psutil
import pytest
import requests
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.models import Campaign, CampaignError, CampaignRange, Message, MessageEvent, Status
from tests.factories import recipient, tenant_with_key
from tests.harness import start_web
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _send_at() -> str:
    return (timezone.now() + timedelta(days=1)).replace(microsecond=0).isoformat()


def _made(public_id: str):
    row = Campaign.objects.filter(public_id=public_id).values("status", "made_at").first()
    return row if row and row["made_at"] is not None else None


def _one_message_each(public_id: str, numbers: list[str]) -> list[Message]:
    messages = list(Message.objects.filter(campaign__public_id=public_id))
    assert Counter(m.to for m in messages) == Counter(numbers)
    assert {m.status for m in messages} == {Status.SCHEDULED}
    assert MessageEvent.objects.filter(message__campaign__public_id=public_id, kind="created").count() == len(
        numbers
    )
    return messages


def test_json_campaign_is_made_by_a_real_worker(pipeline):
    _, key = tenant_with_key("acme")
    pipeline.worker("campaigns", queues="campaigns", concurrency=1)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    people = [{"phone": recipient(i), "first_name": f"P{i}"} for i in range(50)]
    people.append({"phone": "+1415", "first_name": "Bad"})  # item 51: not a number
    resp = api.post(
        "/v1/campaigns",
        {"template": "Hi {first_name}", "send_at": _send_at(), "recipients": people},
        format="json",
    )
    assert resp.status_code == 202, resp.content
    cid = resp.json()["id"]
    assert wait_for(lambda: _made(cid), 60, "the campaign's messages to be made")["status"] == "active"
    messages = _one_message_each(cid, [recipient(i) for i in range(50)])
    assert {m.body for m in messages} == {f"Hi P{i}" for i in range(50)}
    assert list(CampaignError.objects.filter(campaign__public_id=cid).values_list("line", "code")) == [
        (51, "invalid_number")
    ]
    detail = api.get(f"/v1/campaigns/{cid}").json()
    assert detail["progress"] == {"scheduled": 50}
    assert detail["creation"]["messages_made"] == 50 and detail["creation"]["rows_rejected"] == 1


def test_csv_upload_through_gunicorn_is_made_by_a_real_worker(pipeline, tmp_path):
    _, key = tenant_with_key("acme")
    base = start_web(pipeline)
    pipeline.worker("campaigns", queues="campaigns", concurrency=1)
    n = 12_000  # three batches of the default size: the list spans several stored chunks too
    path = tmp_path / "list.csv"
    path.write_text("phone,first_name,code\n" + "".join(f"{recipient(i)},N{i},{i}\n" for i in range(n)))
    wait_for(lambda: requests.get(f"{base}/healthz", timeout=2).ok, 30, "gunicorn to answer")
    with open(path, "rb") as f:
        resp = requests.post(
            f"{base}/v1/campaigns",
            headers={"Authorization": f"Bearer {key}"},
            data={"template": "Hello {first_name}, code {code}", "send_at": _send_at()},
            files={"recipients": ("list.csv", f, "text/csv")},
            timeout=60,
        )
    assert resp.status_code == 202, resp.text
    cid = resp.json()["id"]
    assert resp.headers["Location"] == f"/v1/campaigns/{cid}"
    assert wait_for(lambda: _made(cid), 120, "the campaign's messages to be made")["status"] == "active"
    messages = _one_message_each(cid, [recipient(i) for i in range(n)])
    assert {m.body for m in messages[:3]} <= {f"Hello N{i}, code {i}" for i in range(n)}
    campaign = Campaign.objects.get(public_id=cid)
    assert (campaign.messages_made, campaign.rows_rejected, campaign.duplicates_skipped) == (n, 0, 0)


def test_a_worker_killed_mid_job_resumes_from_its_checkpoint_and_makes_no_duplicates(pipeline):
    """The list is made in four line ranges by a worker with two processes; one process is killed mid-range.
    Its range's task is redelivered and goes on from that range's checkpoint; the others are not touched.
    The last 1,000 rows repeat numbers of the first range, so ranges also meet each other's numbers."""
    _, key = tenant_with_key("acme")
    pipeline.env["SMSGW_CAMPAIGN_BATCH_SIZE"] = "500"
    pipeline.env["SMSGW_CAMPAIGN_MAKE_RANGES"] = "4"
    pipeline.env["SMSGW_CAMPAIGN_RANGE_MIN_ROWS"] = "2000"
    worker = pipeline.worker("campaigns", queues="campaigns", concurrency=2)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    distinct = [recipient(i) for i in range(19_000)]
    numbers = distinct + distinct[:1000]
    people = [{"phone": n, "first_name": "A"} for n in numbers]
    resp = api.post(
        "/v1/campaigns",
        {"template": "Hi {first_name}", "send_at": _send_at(), "recipients": people},
        format="json",
    )
    assert resp.status_code == 202, resp.content
    cid = resp.json()["id"]
    wait_for(
        lambda: Campaign.objects.filter(public_id=cid, messages_made__gt=0).exists(),
        60,
        "the first batch to commit",
        interval=0.01,
    )
    made_before = Campaign.objects.get(public_id=cid).messages_made
    # A pool process dies mid-job (as under the OOM killer); the parent sees the loss and, with
    # acks_late and reject_on_worker_lost, the task goes back to the queue for the next pool process.
    child = psutil.Process(worker.pid).children(recursive=True)[0]
    os.kill(child.pid, signal.SIGKILL)
    assert wait_for(lambda: _made(cid), 180, "the resumed job to finish")["status"] == "active"
    campaign = Campaign.objects.get(public_id=cid)
    assert made_before < len(distinct), "the job finished before the kill; nothing was resumed"
    ranges = list(
        CampaignRange.objects.filter(campaign=campaign).order_by("index").values_list("first", "done")
    )
    assert ranges == [(0, True), (5000, True), (10_000, True), (15_000, True)]
    _one_message_each(cid, distinct)
    assert (campaign.messages_made, campaign.duplicates_skipped, campaign.recipients_total) == (
        19_000,
        1000,
        20_000,
    )
    errors = CampaignError.objects.filter(campaign=campaign)
    assert errors.count() == 1000 and set(errors.values_list("code", flat=True)) == {"duplicate"}
