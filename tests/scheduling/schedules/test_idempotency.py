"""``Idempotency-Key`` on ``POST /v1/schedules`` (docs/idempotency.md): a retried create gets the first
schedule back instead of making a second recurring one; a key reused with another body is refused; two
requests racing with one key make exactly one schedule (real PostgreSQL, two threads, two connections)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.models import Message, Schedule, ScheduleVersion
from scheduling.schedules import service as schedule_service
from tests.factories import RECIPIENT, tenant_with_key

BARRIER_SECONDS = 20  # a deadline, not a pause: both threads normally meet within milliseconds


def body(**fields) -> dict:
    start = (timezone.now() + timedelta(hours=1)).replace(second=0, microsecond=0, tzinfo=None)
    return {
        "to": RECIPIENT,
        "body": "Take your medicine",
        "rrule": "FREQ=HOURLY;INTERVAL=6",
        "start": start.isoformat(),
        "timezone": "UTC",
        **fields,
    }


def post(api, data: dict, key: str | None = None):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {}
    return api.post("/v1/schedules", data, format="json", **headers)


@pytest.mark.django_db
def test_a_repeat_with_the_same_key_and_body_replays_the_first_schedule(api):
    data = body()
    first = post(api, data, "sched-1")
    assert first.status_code == 201, first.content
    assert "Idempotent-Replayed" not in first
    made = Message.objects.filter(schedule__public_id=first.json()["id"]).count()
    assert made == first.json()["occurrences"]["materialized"] > 0

    again = post(api, data, "sched-1")
    assert again.status_code == 200, again.content
    assert again["Idempotent-Replayed"] == "true"
    assert again["Location"] == first["Location"]
    assert again.json()["id"] == first.json()["id"] and again.json()["changed"] is False
    assert again.json()["occurrences"]["materialized"] == 0
    assert Schedule.objects.count() == 1 and ScheduleVersion.objects.count() == 1
    assert Message.objects.count() == made


@pytest.mark.django_db
def test_the_same_key_with_another_body_is_a_422_and_stores_nothing(api):
    first = post(api, body(), "sched-2")
    assert first.status_code == 201
    other = post(api, body(body="Another text"), "sched-2")
    assert other.status_code == 422, other.content
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert Schedule.objects.count() == 1


@pytest.mark.django_db
def test_without_a_key_each_post_makes_a_schedule_and_keys_are_per_tenant(api):
    data = body()
    assert post(api, data).status_code == 201 and post(api, data).status_code == 201
    assert Schedule.objects.count() == 2

    _other, raw = tenant_with_key("globex")
    globex = APIClient()
    globex.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert post(api, data, "shared-key").status_code == 201
    assert post(globex, data, "shared-key").status_code == 201  # another tenant's key space
    assert Schedule.objects.filter(idempotency_key="shared-key").count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["", "   ", "x" * 256])
def test_a_bad_key_is_a_400_naming_the_header(api, key):
    resp = post(api, body(), key)
    assert resp.status_code == 400, resp.content
    assert "Idempotency-Key" in resp.json()["error"]["fields"]
    assert Schedule.objects.count() == 0


@pytest.mark.django_db
def test_the_schedule_key_space_is_apart_from_the_messages_one(api):
    sent = api.post(
        "/v1/messages", {"to": RECIPIENT, "body": "hello"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )
    assert sent.status_code == 201
    assert post(api, body(), "k-1").status_code == 201


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("same_body", [True, False], ids=["same-body", "other-body"])
def test_two_concurrent_creates_with_one_key_make_exactly_one_schedule(monkeypatch, same_body):
    """Both requests pass the look-up before either inserts (a barrier inside the service holds them
    there), so the unique key, not the look-up, decides: the loser waits on the winner's commit, and
    answers with its schedule (same body) or the mismatch error (another body)."""
    tenant, raw = tenant_with_key("acme")
    barrier = threading.Barrier(2, timeout=BARRIER_SECONDS)
    definition = schedule_service._definition

    def both_past_the_lookup(*args, **kwargs):
        barrier.wait()
        return definition(*args, **kwargs)

    monkeypatch.setattr(schedule_service, "_definition", both_past_the_lookup)
    data = body()
    bodies = [data, data if same_body else {**data, "body": "Another text"}]
    answers: list = [None, None]

    def send(i: int) -> None:
        try:
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
            answers[i] = post(client, bodies[i], "race-key")
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=BARRIER_SECONDS * 2)
        assert not t.is_alive(), "a request did not finish"

    codes = sorted(a.status_code for a in answers)
    assert Schedule.objects.filter(tenant=tenant).count() == 1
    schedule = Schedule.objects.get(tenant=tenant)
    assert ScheduleVersion.objects.filter(schedule=schedule).count() == 1
    winner = next(a for a in answers if a.status_code == 201)
    assert winner.json()["id"] == schedule.public_id
    assert Message.objects.filter(tenant=tenant).count() == winner.json()["occurrences"]["materialized"]
    if same_body:
        assert codes == [200, 201]
        loser = next(a for a in answers if a.status_code == 200)
        assert loser["Idempotent-Replayed"] == "true" and loser.json()["id"] == schedule.public_id
    else:
        assert codes == [201, 422]
        loser = next(a for a in answers if a.status_code == 422)
        assert loser.json()["error"]["code"] == "idempotency_key_reused"
