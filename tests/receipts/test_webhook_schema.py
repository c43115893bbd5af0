"""The schema's `webhooks` against what is really sent: a status change and a reply, each made by the code
that makes it (the API's cancel, the inbound processor), delivered to a real HTTP receiver, its body
validated strictly against the notification's documented payload and its headers against the declared
ones. The schema cannot drift from the payloads without this failing."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone
from jsonschema import Draft202012Validator
from rest_framework.test import APIClient

from receipts.webhooks import webhooks_deliver_due
from scheduling.models import Message, Status
from tests.factories import RECIPIENT, message, tenant_with_key
from tests.smsgw.http.test_openapi_contract import served_schema, strict
from tests.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.django_db


def _check(spec: dict, received: dict) -> None:
    """The delivery fits the notification its `type` names: body and every required header."""
    notification = spec["webhooks"][received["json"]["type"]]["post"]
    payload = notification["requestBody"]["content"]["application/json"]["schema"]
    validator = Draft202012Validator({**payload, "components": spec["components"]})
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(received["json"])]
    assert not errors, (received["json"], errors)
    headers = {name.lower(): value for name, value in received["headers"].items()}
    required = {p["name"].lower() for p in notification["parameters"] if p.get("required")}
    assert required <= headers.keys(), required - headers.keys()
    # The id a tenant replays it by: it fits the documented path parameter.
    replay = spec["paths"]["/v1/webhook-deliveries/{webhook_id}/replay"]["post"]["parameters"]
    [webhook_id] = [p for p in replay if p["name"] == "webhook_id"]
    assert re.search(webhook_id["schema"]["pattern"], headers["webhook-id"]), headers["webhook-id"]


@pytest.fixture
def receiver(settings):
    settings.WEBHOOK_ALLOW_PRIVATE = True
    settings.WEBHOOK_ALLOW_HTTP = True
    server = WebhookReceiver().start()
    yield server
    server.stop()


def test_a_status_change_notification_fits_the_documented_payload(receiver):
    tenant, key = tenant_with_key("acme")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.put("/v1/webhook", {"url": receiver.url}, format="json").status_code == 200
    msg = message(tenant)
    Message.objects.filter(pk=msg.pk).update(metadata={"order": "A-1"})
    assert api.post(f"/v1/messages/{msg.public_id}/cancel").status_code == 200
    assert webhooks_deliver_due() == 1
    [got] = receiver.received
    assert got["json"]["type"] == "message.status_changed"
    assert got["json"]["data"]["event"] == "cancelled" and got["json"]["data"]["reason"]
    _check(strict(served_schema()), got)


def test_a_reply_notification_fits_the_documented_payload(receiver, settings):
    from inbound.process import inbound_process_due
    from tests.inbound.helpers import configure, twilio_form, twilio_post

    configure(settings)
    tenant, key = tenant_with_key("acme")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert api.put("/v1/webhook", {"url": receiver.url}, format="json").status_code == 200
    sent = message(tenant, to=RECIPIENT, status=Status.DELIVERED)
    Message.objects.filter(pk=sent.pk).update(sent_at=timezone.now())
    assert twilio_post(twilio_form("STOP", RECIPIENT, tenant.default_from)).status_code == 200
    inbound_process_due()
    webhooks_deliver_due()
    received = [r for r in receiver.received if r["json"]["type"] == "message.received"]
    assert len(received) == 1, receiver.received
    assert received[0]["json"]["data"]["action"] == "opt_out"
    _check(strict(served_schema()), received[0])


def test_every_notification_type_the_outbox_sends_is_documented():
    from receipts.webhooks import EVENT_TYPE, INBOUND_EVENT

    assert set(served_schema()["webhooks"]) == {EVENT_TYPE, INBOUND_EVENT}
