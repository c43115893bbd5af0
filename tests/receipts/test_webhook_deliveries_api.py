"""``GET /v1/webhook-deliveries`` (docs/webhooks.md): a tenant lists its own deliveries, newest first in
cursor pages, filtered by status, event type, message and creation time; a bad filter is a 400 naming it;
a dead one found there is replayed; a failed message's payload carries its ``reason_code``."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from receipts.models import WebhookDelivery, WebhookStatus
from receipts.webhooks import INBOUND_EVENT, webhooks_deliver_due
from scheduling.lifecycle import transitions
from scheduling.models import Status
from tests.factories import message, tenant_with_key

pytestmark = pytest.mark.django_db

URL = "/v1/webhook-deliveries"


def hooked(slug: str):
    tenant, key = tenant_with_key(slug)
    tenant.webhook_url, tenant.webhook_secret = "https://127.0.0.1:9/hook", "whsec_" + "A" * 32
    tenant.save(update_fields=["webhook_url", "webhook_secret"])
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return tenant, api


def queue(msg) -> None:
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")


def ids(resp) -> list[str]:
    assert resp.status_code == 200, resp.content
    return [d["id"] for d in resp.json()["results"]]


def test_a_tenant_lists_only_its_own_deliveries_newest_first_in_pages():
    tenant, api = hooked("acme")
    other, other_api = hooked("globex")
    mine = [message(tenant) for _ in range(3)]
    for m in mine:
        queue(m)
    queue(message(other))
    expected = list(
        WebhookDelivery.objects.filter(tenant=tenant).order_by("-id").values_list("webhook_id", flat=True)
    )
    assert len(expected) == 3

    first = api.get(URL, {"page_size": 2})
    assert ids(first) == expected[:2]
    assert ids(api.get(first.json()["next"])) == expected[2:]
    assert len(ids(other_api.get(URL))) == 1

    item = api.get(URL, {"page_size": 1}).json()["results"][0]
    assert item["event_type"] == "message.status_changed" and item["status"] == "pending"
    assert item["message"] == mine[-1].public_id and item["attempts"] == 0
    assert item["payload"]["data"]["status"] == "queued" and item["retry_until"] is None
    assert item["next_attempt_at"] is not None and item["delivered_at"] is None


def test_filters_by_status_event_type_message_and_time():
    tenant, api = hooked("acme")
    a, b = message(tenant), message(tenant)
    queue(a)
    queue(b)
    da = WebhookDelivery.objects.get(message=a)
    db = WebhookDelivery.objects.get(message=b)
    WebhookDelivery.objects.filter(pk=da.pk).update(status=WebhookStatus.DEAD)
    WebhookDelivery.objects.filter(pk=db.pk).update(
        event_type=INBOUND_EVENT, created_at=timezone.now() - timedelta(days=2)
    )

    assert ids(api.get(URL, {"status": "dead"})) == [da.webhook_id]
    assert ids(api.get(URL, {"status": "pending,delivered"})) == [db.webhook_id]
    assert ids(api.get(URL, {"event_type": "message.received"})) == [db.webhook_id]
    assert ids(api.get(URL, {"event_type": "message.status_changed,message.received"})) == [
        db.webhook_id,
        da.webhook_id,
    ]
    assert ids(api.get(URL, {"message": a.public_id})) == [da.webhook_id]
    assert ids(api.get(URL, {"message": "msg_unknown"})) == []
    yesterday = (timezone.now() - timedelta(days=1)).isoformat()
    assert ids(api.get(URL, {"created_after": yesterday})) == [da.webhook_id]
    assert ids(api.get(URL, {"created_before": yesterday})) == [db.webhook_id]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "gone"}, "status"),
        ({"event_type": "message.deleted"}, "event_type"),
        ({"created_after": "yesterday"}, "created_after"),
        ({"created_before": "2026-12-01T09:00:00"}, "created_before"),  # no offset
        ({"created_after": "0001-01-01T00:00:00+01:00"}, "created_after"),
        ({"message": ""}, "message"),
        ({"stauts": "dead"}, "stauts"),
        ({"page_size": "0"}, "page_size"),
        ({"cursor": "garbage"}, "cursor"),
    ],
)
def test_a_bad_filter_is_a_400_naming_it(params, field):
    _tenant, api = hooked("acme")
    resp = api.get(URL, params)
    assert resp.status_code == 400, resp.content
    assert field in resp.json()["error"]["fields"]


def test_a_dead_delivery_is_found_by_the_list_and_replayed():
    tenant, api = hooked("acme")
    queue(message(tenant))
    delivery = WebhookDelivery.objects.get()
    WebhookDelivery.objects.filter(pk=delivery.pk).update(status=WebhookStatus.DEAD, attempts=20)
    [dead] = api.get(URL, {"status": "dead"}).json()["results"]
    assert dead["next_attempt_at"] is None and dead["attempts"] == 20
    replayed = api.post(f"{URL}/{dead['id']}/replay")
    assert replayed.status_code == 200 and replayed.json()["status"] == "pending"
    assert ids(api.get(URL, {"status": "dead"})) == []
    assert ids(api.get(URL, {"status": "pending"})) == [dead["id"]]


def test_a_pending_delivery_after_a_failure_shows_its_retry_window(settings):
    settings.WEBHOOK_ALLOW_PRIVATE = True
    tenant, api = hooked("acme")
    queue(message(tenant))
    webhooks_deliver_due()  # nothing listens on port 9: a failure
    [item] = api.get(URL).json()["results"]
    assert item["status"] == "pending" and item["attempts"] == 1 and item["last_error"]
    delivery = WebhookDelivery.objects.get()
    assert delivery.retrying_since is not None
    window = timedelta(seconds=settings.WEBHOOK_RETRY_WINDOW_SECONDS)
    assert datetime.fromisoformat(item["retry_until"]) == delivery.retrying_since + window
    assert item["retry_until"].endswith("Z") and item["next_attempt_at"].endswith("Z")


@pytest.mark.parametrize(
    ("final", "reason_code"),
    [(Status.FAILED, "provider_rejected"), (Status.UNDELIVERED, "provider_undelivered")],
)
def test_a_failed_or_undelivered_messages_payload_carries_its_reason_code(final, reason_code):
    tenant, api = hooked("acme")
    msg = message(tenant)
    queue(msg)
    transitions.transition(msg.pk, from_statuses=[Status.QUEUED], to_status=Status.SENDING, kind="sending")
    transitions.transition(
        msg.pk,
        from_statuses=[Status.SENDING],
        to_status=final,
        kind=final,
        set_fields={"reason_code": reason_code, "error_code": "30003"},
    )
    [latest, *earlier] = api.get(URL, {"message": msg.public_id}).json()["results"]
    data = latest["payload"]["data"]
    assert data["status"] == final and data["reason_code"] == reason_code and data["error_code"] == "30003"
    assert all(d["payload"]["data"]["reason_code"] == "" for d in earlier)
    # The version orders a message's notifications, whatever order they arrive in.
    versions = [d["payload"]["data"]["version"] for d in [latest, *earlier]]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)
