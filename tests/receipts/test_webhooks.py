"""Tenant webhooks: outbox in the status change's transaction, Standard Webhooks signatures checked by
an independent implementation written here, retries until a down endpoint comes back (once), dead
letter and replay, and SSRF refusal at configuration time."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

import pytest
from django.db import transaction
from django.utils import timezone
from rest_framework.test import APIClient

from receipts.models import WebhookDelivery, WebhookStatus
from receipts.webhooks import webhook_replay, webhooks_deliver_due
from scheduling.lifecycle import transitions
from scheduling.models import Status
from tests.factories import message, queued_by_an_unreachable_host, tenant_with_key
from tests.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.django_db


def verify_standard_webhook(secret: str, headers: dict, body: str, tolerance: int = 300) -> bool:
    """Independent Standard Webhooks verifier (spec: HMAC-SHA256 over "id.timestamp.body", key = the
    base64 part of "whsec_...", signature header "v1,<base64>" possibly space-separated)."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    msg_id, ts = headers["webhook-id"], headers["webhook-timestamp"]
    if abs(time.time() - int(ts)) > tolerance:
        return False
    expected = base64.b64encode(
        hmac.new(key, f"{msg_id}.{ts}.{body}".encode(), hashlib.sha256).digest()
    ).decode()
    return any(
        sig.split(",", 1)[0] == "v1" and hmac.compare_digest(sig.split(",", 1)[1], expected)
        for sig in headers["webhook-signature"].split()
    )


@pytest.fixture
def hooked(settings):
    settings.WEBHOOK_ALLOW_PRIVATE = True
    settings.WEBHOOK_ALLOW_HTTP = True
    settings.WEBHOOK_RETRY_BASE_SECONDS = 0.0
    tenant, key = tenant_with_key("acme")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return tenant, api


def configure(api, url):
    resp = api.put("/v1/webhook", {"url": url}, format="json")
    assert resp.status_code == 200, resp.content
    return resp.json()


def due_now():
    WebhookDelivery.objects.filter(status=WebhookStatus.PENDING).update(next_attempt_at=timezone.now())


def test_status_change_enqueues_in_the_same_transaction(hooked):
    tenant, api = hooked
    configure(api, "http://127.0.0.1:9/hook")
    msg = message(tenant)
    with pytest.raises(RuntimeError), transaction.atomic():
        transitions.transition(
            msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.CANCELLED, kind="cancelled"
        )
        assert WebhookDelivery.objects.count() == 1
        raise RuntimeError("roll back the change")
    assert WebhookDelivery.objects.count() == 0  # the notification rolled back with the change
    transitions.transition(
        msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.CANCELLED, kind="cancelled"
    )
    delivery = WebhookDelivery.objects.get()
    assert (
        delivery.payload["data"]["status"] == "cancelled" and delivery.payload["data"]["id"] == msg.public_id
    )
    assert delivery.payload["data"]["previous_status"] == "scheduled"


def test_no_outbox_rows_for_a_tenant_without_webhook(hooked):
    tenant, _ = hooked
    msg = message(tenant)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    assert WebhookDelivery.objects.count() == 0


def test_delivery_is_signed_and_verifies_independently(hooked):
    tenant, api = hooked
    receiver = WebhookReceiver().start()
    try:
        secret = configure(api, receiver.url)["secret"]
        assert secret.startswith("whsec_")
        msg = message(tenant)
        transitions.transition(
            msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued"
        )
        assert webhooks_deliver_due() == 1
        got = receiver.received[0]
        assert verify_standard_webhook(secret, got["headers"], got["body"])
        tampered = got["body"].replace('"queued"', '"sent"')
        assert not verify_standard_webhook(secret, got["headers"], tampered)
        assert got["json"]["data"]["status"] == "queued"
        assert WebhookDelivery.objects.get().status == WebhookStatus.DELIVERED
    finally:
        receiver.stop()


def test_endpoint_down_receives_the_event_after_it_comes_back_once(hooked):
    tenant, api = hooked
    receiver = WebhookReceiver()  # not started: connection refused
    configure(api, receiver.url)
    msg = message(tenant)
    transitions.transition(
        msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.CANCELLED, kind="cancelled"
    )
    for _ in range(3):
        due_now()
        webhooks_deliver_due()
    delivery = WebhookDelivery.objects.get()
    assert (
        delivery.status == WebhookStatus.PENDING
        and delivery.attempts == 3
        and delivery.last_status_code is None
    )
    receiver.start()
    try:
        due_now()
        webhooks_deliver_due()
        due_now()
        webhooks_deliver_due()  # nothing left to send
        assert len(receiver.received) == 1
        assert receiver.received[0]["headers"]["webhook-id"] == delivery.webhook_id
        delivery.refresh_from_db()
        assert delivery.status == WebhookStatus.DELIVERED and delivery.attempts == 4
    finally:
        receiver.stop()


def test_retries_keep_the_webhook_id_then_dead_letter_then_replay(hooked, settings):
    tenant, api = hooked
    receiver = WebhookReceiver(fail_first=3).start()
    try:
        configure(api, receiver.url)
        msg = message(tenant)
        transitions.transition(
            msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued"
        )
        for attempt in range(3):
            if attempt == 2:  # the retry window (receipts.webhook_retry) is over by the third attempt
                settings.WEBHOOK_RETRY_WINDOW_SECONDS = 0
            due_now()
            webhooks_deliver_due()
        delivery = WebhookDelivery.objects.get()
        assert delivery.status == WebhookStatus.DEAD and delivery.last_status_code == 503
        assert [h["code"] for h in delivery.history] == [503, 503, 503]
        resp = api.post(f"/v1/webhook-deliveries/{delivery.webhook_id}/replay")
        assert resp.status_code == 200 and resp.json()["status"] == "pending"
        delivery.refresh_from_db()
        assert delivery.retrying_since is None  # a replay gets a whole retry window again
        webhooks_deliver_due()
        assert len(receiver.received) == 1
        assert receiver.received[0]["headers"]["webhook-id"] == delivery.webhook_id
    finally:
        receiver.stop()


def test_replay_of_another_tenants_delivery_is_404(hooked):
    tenant, api = hooked
    other, _ = tenant_with_key("other")
    configure(api, "http://127.0.0.1:9/hook")
    msg = message(tenant)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    delivery = WebhookDelivery.objects.get()
    with pytest.raises(WebhookDelivery.DoesNotExist):
        webhook_replay(tenant=other, webhook_id=delivery.webhook_id)


@pytest.mark.parametrize(
    ("url", "allow_http", "allow_private"),
    [
        ("http://example.com/hook", False, False),
        ("https://127.0.0.1/hook", True, False),
        ("https://10.1.2.3/hook", True, False),
        ("https://169.254.169.254/latest/meta-data", True, False),
        ("https://[::1]/hook", True, False),
        ("https://localhost/hook", True, False),
        ("ftp://example.com/hook", True, True),
        ("not a url", True, True),
        # IPv6 forms that lead to IPv4 loopback or private space
        ("https://[64:ff9b::7f00:1]/hook", True, False),  # NAT64 of 127.0.0.1
        ("https://[64:ff9b:1::a01:203]/hook", True, False),  # local-use NAT64 of 10.1.2.3
        ("https://[2002:7f00:1::]/hook", True, False),  # 6to4 of 127.0.0.1
        ("https://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/hook", True, False),  # Teredo, client 10.0.0.1
        ("https://[::ffff:127.0.0.1]/hook", True, False),  # IPv4-mapped
        ("https://[::127.0.0.1]/hook", True, False),  # IPv4-compatible
        # malformed: a clear 400, never a 500
        ("https://[/", True, True),
        ("https://example.com:99999/hook", True, True),
        ("https://example.com:abc/hook", True, True),
        ("https://[::1\x00]/hook", True, True),
        ("https://exa\x00mple.com/hook", True, True),
    ],
)
def test_forbidden_webhook_urls_are_rejected_at_configuration(settings, url, allow_http, allow_private):
    settings.WEBHOOK_ALLOW_HTTP = allow_http
    settings.WEBHOOK_ALLOW_PRIVATE = allow_private
    tenant, key = tenant_with_key("acme")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    resp = api.put("/v1/webhook", {"url": url}, format="json")
    assert resp.status_code == 400 and "url" in resp.json()["error"]["fields"]
    tenant.refresh_from_db()
    assert tenant.webhook_url == "" and tenant.webhook_secret == ""


def test_delivery_time_check_refuses_a_url_that_became_private(hooked, settings):
    tenant, api = hooked
    configure(api, "http://127.0.0.1:9/hook")
    settings.WEBHOOK_ALLOW_PRIVATE = False
    msg = message(tenant)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    webhooks_deliver_due()
    delivery = WebhookDelivery.objects.get()
    assert delivery.last_error.startswith("refused") and delivery.status == WebhookStatus.PENDING


def test_a_public_address_passes_the_guard():
    import ipaddress

    from receipts.webhooks import address_is_public

    for public in ("93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "64:ff9b::5db8:d822"):
        assert address_is_public(ipaddress.ip_address(public)), public


def test_delete_removes_the_webhook_and_its_secret_and_queued_deliveries_stop(hooked):
    tenant, api = hooked
    configure(api, "http://127.0.0.1:9/hook")
    msg = message(tenant)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    resp = api.delete("/v1/webhook")
    assert resp.status_code == 204
    tenant.refresh_from_db()
    assert tenant.webhook_url == "" and tenant.webhook_secret == ""
    assert api.get("/v1/webhook").json() == {"url": "", "has_secret": False}
    webhooks_deliver_due()
    delivery = WebhookDelivery.objects.get()
    assert delivery.last_error == "tenant has no webhook configured"
    assert delivery.status == WebhookStatus.DEAD  # not retried for days: replayable once a webhook is set


def test_the_webhook_reason_names_no_host(hooked):
    tenant, api = hooked
    configure(api, "http://127.0.0.1:9/hook")
    msg = message(tenant)
    queued_by_an_unreachable_host(msg.pk)
    assert WebhookDelivery.objects.get().payload["data"]["reason"] == (
        "this host cannot reach the provider; waiting"
    )
